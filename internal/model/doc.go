// Package model is sluice's CPU forward pass for decoder-only transformers
// over a paged, owner-checked KV cache.
//
// Supported: architectures "llama" (Llama 1/2/3, Mistral-style files; GQA;
// RoPE NORM; linear RoPE scaling and rope_freqs.weight factors), "qwen2"
// (Q/K/V biases, RoPE NEOX, output tied to token_embd when output.weight
// is absent), "qwen3" (per-head Q/K RMSNorm, head_dim from key_length) and
// "gemma3" (text: scaled embeddings, GeGLU, post-norms, sliding-window and
// global layers). Weight types are whatever internal/kernels multiplies
// (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K); norms and
// biases may be any type internal/quant decodes. Load refuses anything
// else with an *Error naming the tensor or key (CodeUnsupportedArch,
// CodeMissingTensor, CodeBadShape, CodeBadMetadata, ...): an unknown RoPE
// scaling type, a soft-capping key, a tensor the architecture would ignore.
//
// Weights are never copied: every matrix aliases the GGUF mapping, and an
// embedding row is decoded when its token is looked up.
//
// # Layout: one file per architecture over shared blocks
//
//   - forward.go: Model, Runner and Forward, the step driver (embedding,
//     RoPE tables, the layer loop, final norm and logits), and the paged
//     attention core (attention, attendUnit; attn_prefill.go's
//     attendTokens), which reads K/V only through each sequence's KV view.
//   - blocks.go: the building blocks. block (one layer), attention (Q/K/V
//     projections with optional biases and per-head Q/K norms, RoPE, the
//     K/V writes and checked reads, sliding window, output projection),
//     ffn (denseFFN: SiLU- or GELU-tanh-gated; a mixture-of-experts FFN
//     implements the same interface), norm/addNorm/addResidual.
//   - arch.go: the registry (general.architecture -> archDef), the shared
//     metadata keys (configFrom), the loader that reads tensors by their
//     llama.cpp names with shape and type checks, and build.
//   - arch_llama.go (preNormBlock, shared by llama, qwen2, qwen3),
//     arch_qwen2.go, arch_qwen3.go, arch_gemma3.go (gemma3Block): each
//     names its tensors and writes its layer as the paper's equations.
//
// To add an architecture: write arch_<name>.go with an init that calls
// register(name, &archDef{rope, config, build}). config reads the keys the
// shared ones do not cover and refuses values it does not implement;
// build loads each layer with the loader (ld.vec, ld.mat, ld.attention,
// ld.denseFFN, ld.refuse) into a block whose forward composes the shared
// blocks, and sets m.ropes (one entry per RoPE variant; attention.rope
// picks one), m.attnScale and m.embdScale. A block reaches K/V only
// through attention.forward, which writes with KV.Put and reads with
// KV.Block/Block16 under the view's owner and generation checks; there is
// no other path to the cache. Add a reference test against llama.cpp
// (testdata/reference) and a batch-invariance case.
//
// # One step, many sequences
//
// Runner.Forward takes any mix of prefill chunks and single decode tokens.
// All tokens of all sequences go through each matmul together; attention
// runs per sequence and reads past keys and values only through the
// sequence's KV view (Put first, then Block), so a page the view refuses
// (stale generation, foreign owner, unwritten slot: I3, I4) fails that
// sequence with CodeKV and the view's error as cause, and no other.
//
// # Batch invariance
//
// A token's K/V and logits are bitwise identical however its prompt was
// chunked, whatever shares the step and whatever the thread count: each
// matmul element has a fixed reduction order (internal/kernels), RMSNorm
// sums in float64 in a fixed lane order (kernels.SumSquares), RoPE angles depend only on the
// position, and attention for a (token, KV head) sums scores and values in
// position order, with work split across (token, head) units and never
// inside one reduction. TestBatchInvariance checks it on every weight type.
//
// # Matching llama.cpp
//
// The arithmetic follows ggml's CPU backend where it matters for the
// result: activations are quantized (Q8_0 / Q8_K) or rounded (F16, BF16)
// before quantized matmuls, RMSNorm accumulates in double, softmax
// subtracts the max and sums in double, RoPE angles use ggml's float32
// recurrence. Softmax and SiLU are kernels.Softmax and kernels.SiLUMul, on
// the kernels' float32 expf (within 2 ulp of e^x), bit for bit the same on
// every kernel path (kernels' tests compare them). On the shared
// references stories260K's greedy ids match
// exactly and first-step logits within 1e-5; tiny-qwen2's teacher-forced
// top-5 logits within 2e-3.
package model
