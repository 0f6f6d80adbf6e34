package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"sluice/internal/quant"
	"sluice/internal/synth"
)

func init() {
	register(command{name: "synth", summary: "write a seeded synthetic (random-weight) GGUF model", run: runSynth})
}

// presetFlags are the flags a --preset honours: where to write, the
// weight type, the context (metadata only), the seed and the name.
var presetFlags = map[string]bool{"out": true, "preset": true, "vocab-from": true, "type": true, "context": true, "seed": true, "name": true}

func runSynth(args []string) int {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	d := synth.DefaultSpec
	out := fs.String("out", "", "output GGUF path (required)")
	preset := fs.String("preset", "", "llama.cpp benchmark shape: bench-15M or bench-110M (needs --vocab-from, e.g. shared/vocab/ggml-vocab-llama-spm.gguf); it fixes the shape: of the other flags only --context, --seed, --type and --name apply, and any other is refused")
	arch := fs.String("arch", d.Arch, "architecture: llama, qwen2, qwen3, gemma3, qwen3moe or glm4moe")
	layers := fs.Int("layers", d.Layers, "number of transformer blocks")
	embd := fs.Int("embd", d.Embd, "embedding length (n_embd)")
	heads := fs.Int("heads", d.Heads, "attention heads")
	kvHeads := fs.Int("kv-heads", d.KVHeads, "key/value heads (GQA); must divide --heads")
	ff := fs.Int("ff", d.FF, "feed-forward length")
	ctx := fs.Int("context", d.Context, "context length")
	vocab := fs.Int("vocab", 0, "vocabulary size (0 = the tokenizer's; larger pads with unused tokens)")
	typ := fs.String("type", d.Type.String(), "type of the 2-D weights: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K")
	ropeBase := fs.Float64("rope-base", 0, "RoPE frequency base (0 = 10000 for llama, 1e6 for qwen2)")
	seed := fs.Uint64("seed", d.Seed, "random seed; the same flags and seed give the same bytes")
	vocabFrom := fs.String("vocab-from", "", "copy the tokenizer metadata from this GGUF (default: the built-in byte-level BPE vocab)")
	tie := fs.Bool("tie-output", false, "omit output.weight (output projection tied to token_embd)")
	name := fs.String("name", "", "general.name (default: synthetic-<arch|preset>-random-<type>)")
	var moe synth.MoESpec
	fs.IntVar(&moe.HeadDim, "head-dim", 0, "qwen3, gemma3, qwen3moe, glm4moe: attention head dimension (key_length = value_length; 0 = embd/heads)")
	window := fs.Int("sliding-window", 0, "gemma3: attention.sliding_window in tokens (0 = 512); every sixth layer is global")
	ropeScaling := fs.Float64("rope-scaling", 0, "linear RoPE scaling factor, written as rope.scaling.type linear (0 = none; gemma3 applies it to its global layers)")
	spmVocab := fs.Bool("spm-vocab", false, "write the built-in SentencePiece-style vocabulary (byte fallback, Gemma's special-token layout, no space prefix) instead of the byte-level BPE one")
	outScale := fs.Float64("output-scale", 0, "multiply output.weight's spread (0 = 1); ~10 gives decisive greedy choices for reference tests")
	fs.IntVar(&moe.RopeDim, "rope-dim", 0, "qwen3moe, glm4moe: rotated dimensions per head (0 = the head dimension; glm4moe uses half)")
	fs.IntVar(&moe.Experts, "experts", 0, "qwen3moe, glm4moe: routed experts per layer (expert_count)")
	fs.IntVar(&moe.ExpertsUsed, "experts-used", 0, "qwen3moe, glm4moe: experts each token uses (expert_used_count, top-k)")
	fs.IntVar(&moe.ExpertFF, "expert-ff", 0, "qwen3moe, glm4moe: each expert's feed-forward length")
	fs.IntVar(&moe.SharedExperts, "shared-experts", 0, "glm4moe: shared experts (expert_shared_count)")
	fs.IntVar(&moe.DenseLayers, "dense-layers", 0, "glm4moe: leading dense layers (leading_dense_block_count; their FFN is --ff)")
	scale := fs.Float64("expert-weights-scale", 0, "glm4moe: expert_weights_scale (0 = key not written)")
	fs.BoolVar(&moe.WeightsNorm, "expert-weights-norm", false, "glm4moe: expert_weights_norm (renormalise the top-k weights)")
	fs.IntVar(&moe.Groups, "expert-groups", 0, "glm4moe: expert_group_count (0 = key not written)")
	fs.IntVar(&moe.GroupsUsed, "expert-groups-used", 0, "glm4moe: expert_group_used_count")
	fs.IntVar(&moe.NextN, "nextn", 0, "glm4moe: nextn_predict_layers written after --layers (loaded by llama.cpp, never run)")
	fs.BoolVar(&moe.QKNorm, "qk-norm", false, "glm4moe: write attn_q_norm/attn_k_norm (qwen3moe always has them)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice synth --out FILE [--preset bench-15M|bench-110M] [shape flags] [--type q8_0] [--seed N] [--vocab-from GGUF]

Writes a GGUF model with random weights of a real shape: uniform weights with
the spread of N(0, 1/sqrt(fan_in)), norms 1. Its text is gibberish; use it for
speed measurements and for exercising the engine with no model download. With
no shape flags it writes the shape of sluice's built-in default model.

Examples:
  sluice synth --out /tmp/b15.gguf --preset bench-15M --vocab-from ../shared/vocab/ggml-vocab-llama-spm.gguf
  sluice synth --out /tmp/tiny.gguf --layers 2 --embd 64 --heads 4 --kv-heads 2 --ff 192 --type f32
  sluice synth --out /tmp/q3.gguf --arch qwen3 --layers 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 --ff 128
  sluice synth --out /tmp/g3.gguf --arch gemma3 --layers 6 --embd 64 --heads 2 --kv-heads 1 --head-dim 64 --ff 128 --sliding-window 16
  sluice synth --out /tmp/q3moe.gguf --arch qwen3moe --layers 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 \
      --experts 8 --experts-used 2 --expert-ff 64 --type q8_0
  sluice synth --out /tmp/glm.gguf --arch glm4moe --layers 3 --embd 64 --heads 4 --kv-heads 2 --head-dim 32 \
      --rope-dim 16 --ff 128 --dense-layers 1 --experts 8 --experts-used 2 --expert-ff 64 --shared-experts 1 \
      --expert-weights-norm --expert-weights-scale 2.5 --nextn 1 --type f16

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *out == "" || fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "sluice synth: --out is required (and no positional arguments)")
		fs.Usage()
		return 2
	}
	t, ok := quant.ParseType(*typ)
	if !ok {
		fmt.Fprintf(os.Stderr, "sluice synth: unknown --type %q\n", *typ)
		return 2
	}
	var spec synth.Spec
	if *preset != "" {
		if *vocabFrom == "" {
			fmt.Fprintln(os.Stderr, "sluice synth: --preset needs --vocab-from (the Llama-2 vocab, e.g. shared/vocab/ggml-vocab-llama-spm.gguf)")
			return 2
		}
		var err error
		if spec, err = synth.PresetSpec(*preset, t, *vocabFrom); err != nil {
			fmt.Fprintln(os.Stderr, "sluice synth:", err)
			return 2
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		// A flag the preset would not honour is refused, never dropped:
		// a file of another shape than asked for would be measured as if
		// it were the asked one.
		var ignored []string
		fs.Visit(func(f *flag.Flag) {
			if !presetFlags[f.Name] {
				ignored = append(ignored, "--"+f.Name)
			}
		})
		if len(ignored) > 0 {
			fmt.Fprintf(os.Stderr, "sluice synth: --preset %s fixes the shape, so %s would be ignored: drop it, or give the whole shape with flags and no --preset\n", *preset, strings.Join(ignored, ", "))
			return 2
		}
		if set["seed"] {
			spec.Seed = *seed
		}
		// The context length is not part of a preset's weights (it changes
		// no byte of them, only the metadata), so --context applies: a long
		// context bench needs the bench shape with a 16k or 32k context.
		if set["context"] {
			spec.Context = *ctx
		}
	} else {
		spec = synth.Spec{
			Arch: *arch, Layers: *layers, Embd: *embd, Heads: *heads, KVHeads: *kvHeads, FF: *ff,
			Vocab: *vocab, Context: *ctx, Type: t, RopeBase: *ropeBase, Seed: *seed,
			VocabFrom: *vocabFrom, TieOutput: *tie, MoE: moe,
			SlidingWindow: *window, OutputScale: *outScale, SPMVocab: *spmVocab, RopeScaling: *ropeScaling,
		}
		if *arch == "qwen3" || *arch == "gemma3" {
			// --head-dim is one flag; the dense architectures keep it
			// outside the MoE settings.
			spec.HeadDim, spec.MoE.HeadDim = spec.MoE.HeadDim, 0
		}
		spec.MoE.WeightsScale = float32(*scale)
	}
	if *name != "" {
		spec.Name = *name
	}
	if err := synth.WriteFile(*out, spec); err != nil {
		// synth and gguf errors already name their package.
		fmt.Fprintln(os.Stderr, "sluice", err)
		return 1
	}
	st, _ := os.Stat(*out)
	fmt.Fprintf(os.Stderr, "wrote %s (%d bytes)\n", *out, st.Size())
	return 0
}
