// The core ops of a GPT-2 block, each a _forward / _backward pair over contiguous row-major arrays.
//
// Conventions (DESIGN.md): T tokens, d model width, H heads, dh = d / H. Names follow the seeds:
// x residual row, u = ln_1(x), q k v, S scores, A pattern, z mixed values.
// Every backward ACCUMULATES (+=) into the gradients of parameters and inputs, as a residual stream
// needs, except where a comment says "overwrites". Templated on float (product) and double (checks).
// Beside each fast op, namespace ref has an obviously-correct slow twin with the same signature.
#pragma once
#include <cstdint>

namespace qkv {

#include "qkv/ops_signatures.inc"

namespace ref {
#include "qkv/ops_signatures.inc"
}  // namespace ref

}  // namespace qkv
