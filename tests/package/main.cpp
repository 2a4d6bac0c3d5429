// app MODEL IDS: the family forward of an installed qkv on token ids "a,b,c"; prints the id of the last
// position's largest logit and that logit (tests/package/run.sh compares them with `qkv run`).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <qkv/error.hpp>
#include <qkv/lm.hpp>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: app MODEL ID,ID,...\n");
    return 2;
  }
  try {
    const qkv::Model model = qkv::load_lm(argv[1]);
    std::vector<int> ids;
    std::stringstream ss(argv[2]);
    for (std::string t; std::getline(ss, t, ',');) ids.push_back(std::stoi(t));
    qkv::RunState st;
    const std::vector<float>& logits = qkv::run(model, ids, st);  // [T, vocab]
    const int V = model.arch.vocab_size;
    const float* last = logits.data() + (ids.size() - 1) * size_t(V);
    int best = 0;
    for (int i = 1; i < V; i++)
      if (last[i] > last[best]) best = i;
    std::printf("%d %.9g\n", best, double(last[best]));
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "app: error: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
