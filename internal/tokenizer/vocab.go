// Package tokenizer turns text into token ids and back the way llama.cpp does
// for the two tokenizer families GGUF models ship: SentencePiece-style
// (tokenizer.ggml.model=llama: score-ordered merges, byte fallback <0xNN>,
// the leading-space rule, U+2581 for spaces) and byte-level BPE
// (tokenizer.ggml.model=gpt2: GPT-2 byte-to-unicode map, merges by rank,
// a pre-tokenizer chosen by tokenizer.ggml.pre).
//
// The expected ids in the tests come from Hugging Face tokenizers and from
// llama.cpp itself (../shared/vocab, ../shared/reference), never from this
// code. A Tokenizer is immutable after construction and safe for concurrent
// use.
package tokenizer

import (
	"sort"
	"strings"
)

// Token types as stored in tokenizer.ggml.token_type (llama.cpp's
// llama_token_type).
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Tokenizer models (tokenizer.ggml.model).
const (
	ModelSPM = "llama"
	ModelBPE = "gpt2"
)

// Vocab is everything a tokenizer is built from: what a GGUF file's
// tokenizer.ggml.* keys hold, after llama.cpp's defaults are applied.
// Token ids that a vocabulary does not have are -1; start from
// DefaultVocab(model) to get llama.cpp's defaults rather than zeros (a zero
// id is a real token).
type Vocab struct {
	Model  string    // ModelSPM or ModelBPE
	Pre    string    // BPE pre-tokenizer name: "gpt-2", "llama-bpe", "qwen2", ... ("" = default)
	Tokens []string  // id -> token text as stored (U+2581 for spaces in SPM, byte-level chars in BPE)
	Scores []float32 // SPM merge priority per id; nil means all 0
	Types  []int32   // Type* per id; nil means all normal
	Merges []string  // BPE merges "left right", rank = index

	BOS, EOS, EOT, EOM, UNK, PAD int32
	// EOG lists further ids that end generation (llama.cpp's FIM pad/repo/
	// file-separator ids from tokenizer.ggml.fim_*_token_id).
	EOG []int32

	AddBOS, AddEOS bool
	AddSpacePrefix bool // SPM: prepend a space to the text (and after every special token)

	ChatTemplate string // tokenizer.chat_template, "" if absent
}

// DefaultVocab returns llama.cpp's defaults for a tokenizer model before
// any metadata key overrides them.
//
// One deliberate difference: llama.cpp defaults a gpt2 vocabulary's BOS and
// EOS to id 11 (a comma in GPT-2's vocabulary). A file without an
// eos_token_id key would then stop every generation at the first comma, so
// here they default to "none".
func DefaultVocab(model string) Vocab {
	v := Vocab{Model: model, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1}
	switch model {
	case ModelSPM:
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case ModelBPE:
		// add_bos depends on the pre-tokenizer; see applyPreDefaults.
	}
	return v
}

// applyPreDefaults sets what llama.cpp derives from tokenizer.ggml.pre for a
// BPE vocabulary: Llama-3 style vocabularies add BOS by default.
func (v *Vocab) applyPreDefaults() {
	if v.Model != ModelBPE {
		return
	}
	switch v.Pre {
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "tekken", "chameleon":
		v.AddBOS = true
	}
}

// attribute bits, as llama.cpp's llama_token_attr: a token may gain CONTROL
// when its text names an end-of-turn marker.
type attr uint16

const (
	attrUndefined attr = 0
	attrUnknown   attr = 1 << 0
	attrUnused    attr = 1 << 1
	attrNormal    attr = 1 << 2
	attrControl   attr = 1 << 3
	attrUserDef   attr = 1 << 4
	attrByte      attr = 1 << 5
)

func typeToAttr(t int32) attr {
	switch t {
	case TypeUnknown:
		return attrUnknown
	case TypeUnused:
		return attrUnused
	case TypeNormal:
		return attrNormal
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDef
	case TypeByte:
		return attrByte
	}
	return attrUndefined
}

type kind uint8

const (
	kindSPM kind = iota
	kindBPE
)

// Tokenizer encodes and decodes text for one vocabulary.
type Tokenizer struct {
	kind   kind
	pre    preTokenizer
	tokens []string
	scores []float32
	attrs  []attr
	toID   map[string]int32

	// byteTok[b] is the token for raw byte b: "<0xNN>" (or the one-byte
	// string) in SPM, the GPT-2 byte-level character in BPE; -1 if absent.
	byteTok [256]int32

	// BPE: (left id, right id) -> rank<<32 | merged id.
	ranks        map[uint64]uint64
	ignoreMerges bool

	// spmSplitAtSpace: no token has U+2581 after another character, so
	// SPM text can be merged piece by piece (see encodeSPM).
	spmSplitAtSpace bool

	// special lists the control, user-defined and unknown tokens, longest
	// text first, as llama.cpp's cache_special_tokens. specialText,
	// specialLens (the distinct text lengths) and specialHead (their first
	// bytes) find which of them occur in a text in one pass, instead of one
	// scan of the text per special token.
	special        []int32
	hasUserDefined bool // user-defined tokens are matched even without parseSpecial
	specialText    map[string]int32
	specialLens    []int
	specialHead    [256]bool

	pieces []string // id -> decoded bytes (control tokens: their text)

	bos, eos, eot, unk, pad int32
	eog                     map[int32]bool
	addBOS, addEOS          bool
	addSpacePrefix          bool
	chatTemplate            string
	model, preName          string
}

// eotTexts are the token texts llama.cpp treats as end-of-turn when the file
// names no eot id; eogTexts are those it treats as end-of-generation.
var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>"}
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
		"<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"}
	// FIM texts: llama.cpp forces them to CONTROL; pad/repo/file-sep also end generation.
	fimTexts    = []string{"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>", "<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>", "<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"}
	fimEOGTexts = []string{"<|fim_pad|>", "<fim-pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<|file_sep|>"}
)

// New builds a tokenizer from a vocabulary.
func New(v Vocab) (*Tokenizer, error) {
	t := &Tokenizer{
		model: v.Model, preName: v.Pre,
		bos: v.BOS, eos: v.EOS, eot: v.EOT, unk: v.UNK, pad: v.PAD,
		addBOS: v.AddBOS, addEOS: v.AddEOS, addSpacePrefix: v.AddSpacePrefix,
		chatTemplate: v.ChatTemplate,
	}
	switch v.Model {
	case ModelSPM:
		t.kind = kindSPM
	case ModelBPE:
		t.kind = kindBPE
		pre, ok := preTokenizerFor(v.Pre)
		if !ok {
			return nil, errorf(CodeUnknownPre, "unknown pre-tokenizer %q (tokenizer.ggml.pre); supported: %s", v.Pre, strings.Join(supportedPre(), ", "))
		}
		t.pre = pre
		t.ignoreMerges = pre.ignoreMerges
	default:
		return nil, errorf(CodeUnknownModel, "unsupported tokenizer model %q (tokenizer.ggml.model); supported: %q (SentencePiece-style) and %q (byte-level BPE)", v.Model, ModelSPM, ModelBPE)
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, errorf(CodeMissingKey, "the vocabulary has no tokens (tokenizer.ggml.tokens is missing or empty)")
	}
	if n > 1<<30 {
		return nil, errorf(CodeBadMetadata, "the vocabulary has %d tokens, more than this tokenizer supports", n)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return nil, errorf(CodeBadMetadata, "tokenizer.ggml.scores has %d entries for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, errorf(CodeBadMetadata, "tokenizer.ggml.token_type has %d entries for %d tokens", len(v.Types), n)
	}
	for name, id := range map[string]int32{"BOS": v.BOS, "EOS": v.EOS, "EOT": v.EOT, "EOM": v.EOM, "UNK": v.UNK, "PAD": v.PAD} {
		if id < -1 || int(id) >= n {
			return nil, errorf(CodeBadMetadata, "%s token id %d is outside the vocabulary of %d tokens", name, id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return nil, errorf(CodeBadMetadata, "the vocabulary asks for a BOS token to be added but names none")
	}
	if v.AddEOS && v.EOS < 0 {
		return nil, errorf(CodeBadMetadata, "the vocabulary asks for an EOS token to be added but names none")
	}

	t.tokens = make([]string, n)
	t.scores = make([]float32, n)
	t.attrs = make([]attr, n)
	t.toID = make(map[string]int32, n)
	for i, s := range v.Tokens {
		if s == "" {
			// llama.cpp renames empty tokens so that they stay distinct.
			s = "[EMPTY_" + itoa(i) + "]"
		}
		if prev, dup := t.toID[s]; dup {
			return nil, errorf(CodeDuplicateToken, "tokens %d and %d have the same text %q", prev, i, s)
		}
		t.toID[s] = int32(i)
		t.tokens[i] = s
		if v.Scores != nil {
			t.scores[i] = v.Scores[i]
		}
		t.attrs[i] = attrNormal
		if v.Types != nil {
			t.attrs[i] = typeToAttr(v.Types[i])
		}
	}

	// End-of-generation set, as llama.cpp's special_eog_ids: marker texts,
	// FIM pad/repo/file-separator, then eos/eot/eom. Marker texts are forced
	// to CONTROL so that they are never produced from plain text.
	t.eog = map[int32]bool{}
	forceControl := func(id int32) {
		if t.attrs[id]&attrControl == 0 {
			t.attrs[id] = attrControl
		}
	}
	if t.eot < 0 {
		for _, s := range eotTexts {
			if id, ok := t.toID[s]; ok {
				t.eot = id
				forceControl(id)
				break
			}
		}
	}
	for _, s := range fimTexts {
		if id, ok := t.toID[s]; ok {
			forceControl(id)
		}
	}
	for _, s := range fimEOGTexts {
		if id, ok := t.toID[s]; ok {
			forceControl(id)
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.toID[s]; ok {
			forceControl(id)
			t.eog[id] = true
		}
	}
	for _, id := range append([]int32{v.EOS, v.EOT, v.EOM, t.eot}, v.EOG...) {
		if id >= 0 && int(id) < n {
			t.eog[id] = true
		}
	}

	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	switch t.kind {
	case kindSPM:
		t.spmSplitAtSpace = true
		for _, s := range t.tokens {
			if strings.Contains(strings.TrimLeft(s, spmSpace), spmSpace) {
				t.spmSplitAtSpace = false
				break
			}
		}
		for b := 0; b < 256; b++ {
			if id, ok := t.toID[spmByteText(byte(b))]; ok {
				t.byteTok[b] = id
			} else if id, ok := t.toID[string([]byte{byte(b)})]; ok {
				t.byteTok[b] = id
			}
		}
	case kindBPE:
		for b := 0; b < 256; b++ {
			if id, ok := t.toID[string(byteToRune[b])]; ok {
				t.byteTok[b] = id
			}
		}
		t.ranks = make(map[uint64]uint64, len(v.Merges))
		for rank, m := range v.Merges {
			// llama.cpp splits at the first space after the first byte, so a
			// merge may have a space as its left part.
			sp := strings.IndexByte(m[min(1, len(m)):], ' ')
			if sp < 0 {
				continue
			}
			sp += min(1, len(m))
			l, lok := t.toID[m[:sp]]
			r, rok := t.toID[m[sp+1:]]
			merged, mok := t.toID[m[:sp]+m[sp+1:]]
			// A merge whose parts or result are not tokens can never
			// produce a token; Hugging Face refuses such files, llama.cpp
			// would fall back to bytes. Skipping it keeps both outputs.
			if !lok || !rok || !mok {
				continue
			}
			key := uint64(uint32(l))<<32 | uint64(uint32(r))
			if _, seen := t.ranks[key]; !seen {
				t.ranks[key] = uint64(rank)<<32 | uint64(uint32(merged))
			}
		}
	}

	// Special tokens matched in raw text, longest first (llama.cpp's
	// tokenizer_st_partition order). Ties keep id order so the result does
	// not depend on sort internals.
	t.specialText = map[string]int32{}
	lens := map[int]bool{}
	for id := range t.attrs {
		if t.attrs[id]&(attrControl|attrUserDef|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
			t.hasUserDefined = t.hasUserDefined || t.attrs[id]&attrUserDef != 0
			s := t.tokens[id]
			t.specialText[s] = int32(id)
			lens[len(s)] = true
			t.specialHead[s[0]] = true
		}
	}
	sort.SliceStable(t.special, func(i, j int) bool {
		return len(t.tokens[t.special[i]]) > len(t.tokens[t.special[j]])
	})
	for l := range lens {
		t.specialLens = append(t.specialLens, l)
	}
	sort.Ints(t.specialLens)

	t.pieces = make([]string, n)
	for id := range t.tokens {
		t.pieces[id] = t.computePiece(int32(id))
	}
	return t, nil
}

func spmByteText(b byte) string {
	const hex = "0123456789ABCDEF"
	return string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for i > 0 {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
	}
	return string(b[p:])
}

// Size is the number of tokens in the vocabulary.
func (t *Tokenizer) Size() int { return len(t.tokens) }

// BOS is the beginning-of-sequence id, -1 if none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, -1 if none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT is the end-of-turn id (tokenizer.ggml.eot_token_id, or a token such
// as <|eot_id|> or <|im_end|> found by its text), -1 if none.
func (t *Tokenizer) EOT() int32 { return t.eot }

// PAD is the padding id, -1 if none.
func (t *Tokenizer) PAD() int32 { return t.pad }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// IsEOG reports whether id ends generation: EOS, EOT, and the end-of-turn
// markers llama.cpp recognises by text (<|im_end|>, <|endoftext|>,
// <|eot_id|>, <|eom_id|>, <end_of_turn>, ...).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// ChatTemplate is tokenizer.chat_template, "" if the file has none.
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// Model is the tokenizer model ("llama" or "gpt2"); Pre the pre-tokenizer.
func (t *Tokenizer) Model() string { return t.model }

// Pre is the BPE pre-tokenizer name as given in the vocabulary.
func (t *Tokenizer) Pre() string { return t.preName }

// Token is the token's text as stored in the vocabulary ("" if out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// ID returns the id of a token text as stored in the vocabulary.
func (t *Tokenizer) ID(text string) (int32, bool) {
	id, ok := t.toID[text]
	return id, ok
}

// IsControl reports whether id is a control (or unknown) token, whose text
// Decode leaves out.
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.attrs) && t.attrs[id]&(attrControl|attrUnknown) != 0
}
