// The one source file of the qkv_pch_* object libraries (cmake/pch.cmake): they exist to build the
// precompiled headers that the real targets reuse.
