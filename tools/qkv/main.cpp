#include <cstdio>
int main() { std::puts("qkv"); return 0; }
