package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/utils"
)

// FallbackChatTemplate is used when a model carries no
// tokenizer.chat_template (e.g. stories260K, the built-in default model):
// a system message as a plain paragraph, then "User: ..." / "Assistant: ..."
// lines, ending with "Assistant:" for the model to continue. It is plain
// text on purpose: a model without a template has no special tokens for
// turns, and plain text is what a base model continues best. Tools are
// listed by name, tool results as "Tool result:" lines.
const FallbackChatTemplate = `{% if tools %}{% for tool in tools %}{{ 'Tool ' + tool['function']['name'] + '\n' }}{% endfor %}{{ '\n' }}{% endif %}` +
	`{% for message in messages %}` +
	`{% if message['role'] == 'system' %}{{ message['content'] }}{{ '\n\n' }}` +
	`{% elif message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n' }}` +
	`{% elif message['role'] == 'tool' %}{{ 'Tool result: ' + message['content'] + '\n' }}` +
	`{% else %}{{ 'Assistant: ' + message['content'] + '\n' }}{% endif %}` +
	`{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}`

// ChatMessage is one message given to a chat template.
type ChatMessage struct {
	Role    string
	Content string
	// ToolCalls are an assistant message's calls, as templates read them
	// ({id, type, function: {name, arguments}}); ToolCallID is a tool
	// message's answer to one.
	ToolCalls  []any
	ToolCallID string
	// Name is the message's optional name (OpenAI's messages[].name),
	// given to the template as message.name when set.
	Name string
	// ReasoningContent is an assistant message's reasoning (a thinking
	// model's earlier answer), given to the template as
	// message.reasoning_content when set (Qwen3's template reads it).
	ReasoningContent *string
}

// ChatTemplate renders chat messages into a prompt with a Jinja template, as
// Hugging Face's apply_chat_template does (trim_blocks and lstrip_blocks on,
// raise_exception available).
type ChatTemplate struct {
	tmpl     *exec.Template
	source   string
	fallback bool
	bos, eos string
	// maxBytes bounds one rendering (MaxRenderBytes), maxCalls its macro
	// calls (maxMacroCalls), maxBuilt what it builds (MaxBuildBytes);
	// tests lower them.
	maxBytes, maxCalls int
	maxBuilt           int64
	// maxSteps bounds its loops' steps (maxLoopSteps when 0).
	maxSteps int
}

// errTemplateRaised marks a template's own raise_exception: the template
// rejected the conversation (a 400), not a broken template (a 500).
var errTemplateRaised = errors.New("chat template rejected the messages")

// MaxTemplateBytes bounds a chat template's text, from a model file or
// --chat-template: real templates are a few KiB (the longest known, with
// tool-calling instructions, ~20 KiB), and parsing holds the whole text.
const MaxTemplateBytes = 1 << 20

// NewChatTemplate parses source; an empty source selects
// FallbackChatTemplate. bos and eos are the texts of the model's BOS and EOS
// tokens, visible to the template as bos_token and eos_token.
func NewChatTemplate(source, bos, eos string) (*ChatTemplate, error) {
	if len(source) > MaxTemplateBytes {
		return nil, fmt.Errorf("the chat template is %d bytes, more than the %d (1 MiB) a chat template may hold", len(source), MaxTemplateBytes)
	}
	ct := &ChatTemplate{source: source, bos: bos, eos: eos, maxBytes: MaxRenderBytes, maxCalls: maxMacroCalls, maxBuilt: MaxBuildBytes}
	if strings.TrimSpace(source) == "" {
		ct.source, ct.fallback = FallbackChatTemplate, true
	}
	// The rewritten tree calls the server's functions by name
	// (budgetFuncs, loopStepsFunc, ifElseFunc) and finds its state
	// there (renderStateVar): a template that set, bound or defined one
	// of those names ({% set __sluice_loop_items = __sluice_cmp_side %})
	// replaced the bound it enforces (its loops counted nothing). No
	// template may name them.
	if strings.Contains(ct.source, serverNames) {
		return nil, fmt.Errorf("chat template does not parse: it names %s..., which the server keeps for its own functions", serverNames)
	}
	// A memory loader holding only this template: a template from a model
	// file must not be able to {% include %} files from the server's disk.
	loader, err := loaders.NewMemoryLoader(map[string]string{"/chat": rewriteParenConditionals(markInlineTags(ct.source))})
	if err != nil {
		return nil, err
	}
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	cfg.KeepTrailingNewline = false
	env := *gonja.DefaultEnvironment
	env.ControlStructures = chatControlStructures
	env.Filters = chatFilters
	env.Tests = chatTests
	env.Methods = chatMethods
	env.Context = gonja.DefaultContext.Inherit().Update(exec.NewContext(budgetFuncs)).Update(exec.NewContext(map[string]any{
		"raise_exception": func(msg string) (string, error) {
			return "", fmt.Errorf("%w: %s", errTemplateRaised, msg)
		},
		// Llama 3.1+ templates date their system prompt with it.
		"strftime_now": func(format string) string { return strftime(time.Now(), format) },
		ifElseFunc:     ifElse,
		// gonja's own range feeds its numbers from a goroutine that
		// stays blocked forever when the template does not read them all
		// (range(n)|length, a range in a condition): one goroutine per
		// request leaked. And range(10**12) in a loop built a list of that
		// length. This one is a list, bounded.
		"range": templateRange,
		// gonja's lipsum(n, html, min, max) wrote n paragraphs of
		// max-min words, whatever n and max, before anything counted
		// them (lipsum(1, false, 0, 10**9) is gigabytes). This one
		// charges its text first, and writes the same text every time
		// (lipsumSeed).
		"lipsum": templateLipsum,
		// Every {% for %} charges its items (chatloops.go).
		loopStepsFunc: loopItems,
	}))
	t, err := exec.NewTemplate("/chat", cfg, loader, &env)
	if err != nil {
		return nil, fmt.Errorf("chat template does not parse: %w", err)
	}
	if err := budgetTemplate(t.Root()); err != nil {
		return nil, fmt.Errorf("chat template does not parse: %w", err)
	}
	ct.tmpl = t
	return ct, nil
}

// Reads reports whether the template's text names the variable name as a
// whole identifier: a request parameter that only a template can honour
// (reasoning_effort) is refused when the template never reads it.
func (c *ChatTemplate) Reads(name string) bool {
	for i := 0; ; {
		j := strings.Index(c.source[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !isIdent(c.source[j-1])) && (end == len(c.source) || !isIdent(c.source[end])) {
			return true
		}
		i = end
	}
}

// IsFallback reports whether the model had no template of its own.
func (c *ChatTemplate) IsFallback() bool { return c.fallback }

// Render applies the template with add_generation_prompt set.
func (c *ChatTemplate) Render(msgs []ChatMessage) (string, error) {
	return c.RenderWith(msgs, RenderOptions{})
}

// RenderOptions are a request's inputs to the template beside the
// messages.
type RenderOptions struct {
	// Kwargs are chat_template_kwargs: extra template variables (e.g.
	// Qwen3's enable_thinking), already bounded and checked against
	// ReservedTemplateVars (parseTemplateKwargs).
	Kwargs map[string]any
	// NoGenerationPrompt renders add_generation_prompt false (/tokenize's
	// add_generation_prompt).
	NoGenerationPrompt bool
	// Tools are the request's tools ({type, function: {name,
	// description, parameters}}), given to the template as `tools` as
	// Hugging Face's apply_chat_template does; nil leaves it undefined.
	Tools []any
}

// ReservedTemplateVars are the variables the server sets itself: a
// request's chat_template_kwargs may not replace them (a kwarg named
// messages would change what the model sees behind the checks on
// messages).
var ReservedTemplateVars = map[string]bool{"messages": true, "add_generation_prompt": true, "bos_token": true, "eos_token": true,
	"raise_exception": true, "strftime_now": true, "tools": true, "documents": true, "continue_final_message": true,
	renderStateVar: true, ifElseFunc: true, budgetAddFunc: true, budgetCatFunc: true, budgetMulFunc: true,
	budgetOutFunc: true, budgetMethodFunc: true, loopStepsFunc: true, budgetCmpFunc: true, budgetItemFunc: true,
	budgetDictMethodFunc: true, budgetReadFunc: true, noneVar: true, tupleFunc: true, budgetArithFunc: true}

// RenderTools is Render with the request's tools.
func (c *ChatTemplate) RenderTools(msgs []ChatMessage, tools []any) (string, error) {
	return c.RenderWith(msgs, RenderOptions{Tools: tools})
}

// RenderWith applies the template with the request's options.
func (c *ChatTemplate) RenderWith(msgs []ChatMessage, o RenderOptions) (string, error) {
	out, _, err := c.render(msgs, o)
	return out, err
}

// render is RenderWith, also saying how many bytes of values it built.
func (c *ChatTemplate) render(msgs []ChatMessage, o RenderOptions) (string, int64, error) {
	st := c.newRenderState()
	out, err := c.renderIn(st, msgs, o)
	return out, st.built, err
}

// newRenderState is one request's budgets: its renderings' macro calls,
// loop steps, values built and text written.
func (c *ChatTemplate) newRenderState() *renderState {
	return &renderState{maxCalls: c.maxCalls, maxBuilt: c.maxBuilt, loops: loopSteps{max: c.loopSteps()}, maxOut: c.maxBytes}
}

// renderIn renders within what is left of st's budgets: a second
// rendering with the same st (renderChat's look at whose failure it was)
// gets what the first left, never a fresh set.
func (c *ChatTemplate) renderIn(st *renderState, msgs []ChatMessage, o RenderOptions) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		// In the order vLLM builds a message for the template (role and
		// content first), kept for tojson and .items() (chatorder.go).
		mm := &jsonObject{}
		mm.set("role", m.Role)
		mm.set("content", m.Content)
		if len(m.ToolCalls) > 0 {
			mm.set("tool_calls", m.ToolCalls)
		}
		if m.Role == "tool" {
			mm.set("tool_call_id", m.ToolCallID)
		}
		if m.Name != "" {
			mm.set("name", m.Name)
		}
		if m.ReasoningContent != nil {
			mm.set("reasoning_content", *m.ReasoningContent)
		}
		list[i] = st.plain(mm)
	}
	vars := make(map[string]any, 4+len(o.Kwargs))
	for k, v := range o.Kwargs {
		if !ReservedTemplateVars[k] {
			vars[k] = st.plain(v)
		}
	}
	vars[renderStateVar] = st
	vars["messages"] = list
	vars["add_generation_prompt"] = !o.NoGenerationPrompt
	vars["bos_token"] = c.bos
	vars["eos_token"] = c.eos
	if len(o.Tools) > 0 {
		vars["tools"] = st.plain(o.Tools)
	}
	ctx := exec.NewContext(vars)
	out := cappedWriter{max: max(0, st.maxOut-st.written)}
	err := c.tmpl.Execute(&out, ctx)
	st.written += out.b.Len()
	if st.loops.steps > st.loops.max {
		// Checked whatever Execute returned: a macro's failure is a
		// value a template can test away (is defined).
		return "", fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, st.loops.max)
	}
	if st.over {
		// Whatever the template made of the refusal (a test can
		// turn an error into false): the rendering is over.
		return "", fmt.Errorf("%w: it builds more than %d bytes of strings and lists", ErrRenderTooLarge, c.maxBuilt)
	}
	if err != nil {
		if out.over {
			return "", fmt.Errorf("%w (%d bytes)", ErrRenderTooLarge, c.maxBytes)
		}
		// gonja flattens error chains into text, so the template's own
		// raise_exception is recognised by its marker.
		msg := err.Error()
		if i := strings.Index(msg, errTemplateRaised.Error()+": "); i >= 0 {
			return "", fmt.Errorf("%w: %s", errTemplateRaised, msg[i+len(errTemplateRaised.Error())+2:])
		}
		return "", err
	}
	return out.b.String(), nil
}

// MaxRenderBytes bounds a rendered chat prompt: far beyond what any
// context holds (16M tokens at 4 bytes each), so only a template that
// multiplies its input (a loop over the messages inside a loop over the
// messages) reaches it, and the render stops there instead of taking the
// router's memory.
const MaxRenderBytes = 64 << 20

// ErrRenderTooLarge: the template's output passed MaxRenderBytes.
var ErrRenderTooLarge = errors.New("the chat template's rendering of these messages is larger than any context holds")

// cappedWriter is a template's output, refusing to grow past max.
type cappedWriter struct {
	b    strings.Builder
	max  int
	over bool
}

func (w *cappedWriter) Write(p []byte) (int, error) { return w.WriteString(string(p)) }

func (w *cappedWriter) WriteString(s string) (int, error) {
	if w.over || len(s) > w.max-w.b.Len() {
		w.over = true
		return 0, ErrRenderTooLarge
	}
	return w.b.WriteString(s)
}

// chatFilters are gonja's filters, counted (budgetFilters), with Hugging
// Face's tojson (templateToJSON), jinja2's reverse (templateReverse) and
// string (templateString) for gonja's.
var chatFilters = func() *exec.FilterSet {
	base := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(gonja.DefaultEnvironment.Filters)
	_ = base.Replace("tojson", templateToJSON)
	_ = base.Replace("reverse", templateReverse)
	_ = base.Replace("string", templateString)
	gonjaInt, _ := base.Get("int")
	_ = base.Replace("int", func(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
		if in.IsError() {
			return in
		}
		// Python's exact integers (chatint.go).
		if v, ok, err := templateInt(e, in, p); err != nil {
			return exec.AsValue(fmt.Errorf("int: %w", err))
		} else if ok {
			return v
		}
		return gonjaInt(e, in, p)
	})
	gonjaAbs, _ := base.Get("abs")
	_ = base.Replace("abs", func(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
		if x, ok, err := intOf(e, in); isBigInt(in) && (ok || err != nil) {
			// A request's big integer: exact (chatint.go).
			if err != nil {
				return exec.AsValue(fmt.Errorf("abs: %w", err))
			}
			v, err := intValue(e, x.Abs(x))
			if err != nil {
				return exec.AsValue(fmt.Errorf("abs: %w", err))
			}
			return v
		}
		return gonjaAbs(e, in, p)
	})
	return budgetFilters(base)
}()

// chatControlStructures are gonja's tags for a chat template: no
// include, import, from or extends (Hugging Face's apply_chat_template
// has no loader either; a template that included itself recursed until
// the process died of a stack overflow), and macros whose calls nest at
// most maxMacroDepth deep.
var chatControlStructures = func() *exec.ControlStructureSet {
	set := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	for _, tag := range []string{"include", "import", "from", "extends"} {
		_ = set.Replace(tag, func(_ *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
			return nil, args.Error(tag+" is not available in a chat template (it has no other templates to read)", nil)
		})
	}
	forLoop, _ := set.Get("for")
	_ = set.Replace("for", chatForLoops(forLoop))
	_ = set.Replace("set", parseChatSet)
	_ = set.Replace("filter", parseChatFilterBlock)
	macro, _ := set.Get("macro")
	_ = set.Replace("macro", func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := macro(p, args)
		if m, ok := cs.(*controlStructures.MacroControlStructure); ok && err == nil {
			return boundedMacro{m}, nil
		}
		return cs, err
	})
	return set
}()

// maxMacroDepth bounds how deep a chat template's macro calls nest. A
// Go stack overflow is not an error a render can return: it kills the
// process, every tenant's requests with it, so a macro that recursed
// without end (or as deep as a request's nested JSON) is stopped here.
// Real templates recurse over a tool's schema (at most
// grammar.MaxSchemaDepth, 64, levels); Jinja itself stops near Python's
// recursion limit.
const maxMacroDepth = 256

// maxMacroCalls bounds a rendering's macro calls: a macro that calls
// itself twice is 2^depth calls within the depth bound, a rendering that
// would not end. A real template calls one per message or tool part.
const maxMacroCalls = 1 << 20

// renderStateVar holds one rendering's renderState in its variables.
const renderStateVar = "__sluice_render"

// serverNames begins the name of every function and variable the server
// puts in a template's context (budgetFuncs, renderStateVar...).
const serverNames = "__sluice_"

// renderState is one request's renderings' own: their macro call depth
// and count, their loops' steps (chatloops.go), what they built
// (chatbudget.go) and wrote.
type renderState struct {
	depth, calls, maxCalls int
	loops                  loopSteps
	built, maxBuilt        int64
	over                   bool
	// written is the text the renderings wrote, at most maxOut.
	written, maxOut int
	// order is the key order of each map made of the request's JSON
	// objects (plain, chatorder.go).
	order map[unsafe.Pointer][]string
}

// boundedMacro is a macro definition whose calls count their depth.
type boundedMacro struct {
	*controlStructures.MacroControlStructure
}

func (m boundedMacro) Execute(r *exec.Renderer, tag *nodes.ControlStructureBlock) error {
	if err := m.MacroControlStructure.Execute(r, tag); err != nil {
		return err
	}
	v, _ := r.Environment.Context.Get(m.Name)
	fn, ok := v.(exec.Macro)
	if !ok {
		return fmt.Errorf("macro %s: not defined", m.Name)
	}
	sv, _ := r.Environment.Context.Get(renderStateVar)
	st, _ := sv.(*renderState)
	name := m.Name
	r.Environment.Context.Set(name, exec.Macro(func(params *exec.VarArgs) *exec.Value {
		if st == nil || st.depth >= maxMacroDepth {
			return exec.AsValue(fmt.Errorf("macro %s: calls nested deeper than %d", name, maxMacroDepth))
		}
		if st.calls >= st.maxCalls {
			return exec.AsValue(fmt.Errorf("macro %s: more than %d macro calls in one rendering", name, st.maxCalls))
		}
		st.calls++
		st.depth++
		defer func() { st.depth-- }()
		return fn(params)
	}))
	return nil
}

// maxTemplateRange bounds the numbers one range() in a chat template
// yields: a template's loops count messages or tools (both bounded by the
// request body), never millions.
const maxTemplateRange = 1 << 20

// templateRange is Jinja's range([start,] stop[, step]) as a list,
// charged to the values the rendering builds (elemBytes a number) before
// it is made: range(1048576)|length once per message built 8 MiB a
// message with nothing counted.
func templateRange(e *exec.Evaluator, params *exec.VarArgs) ([]int, error) {
	start, stop, step := 0, 0, 1
	for _, a := range params.Args {
		if !a.IsInteger() {
			return nil, errors.New("range: expected signature is [start, ]stop[, step] where all arguments are integers")
		}
	}
	switch len(params.Args) {
	case 1:
		stop = params.Args[0].Integer()
	case 2:
		start, stop = params.Args[0].Integer(), params.Args[1].Integer()
	case 3:
		start, stop, step = params.Args[0].Integer(), params.Args[1].Integer(), params.Args[2].Integer()
	default:
		return nil, errors.New("range: expected signature is [start, ]stop[, step] where all arguments are integers")
	}
	if step == 0 {
		return nil, errors.New("range: step cannot be 0")
	}
	// The count in unsigned arithmetic: stop-start may not fit an int.
	var n uint64
	switch {
	case step > 0 && start < stop:
		n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		n = (uint64(start)-uint64(stop)-1)/(uint64(-(step+1))+1) + 1
	}
	if n > maxTemplateRange {
		return nil, fmt.Errorf("range: %d numbers; a chat template may count at most %d", n, maxTemplateRange)
	}
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	if err := st.charge(int64(n) * elemBytes); err != nil {
		return nil, err
	}
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// lipsumWordBytes bounds what one word of lipsum costs: its slot in the
// paragraph's list, its letters (the longest word of gonja's list), a
// comma or full stop and a space.
var lipsumWordBytes = func() int64 {
	long := 0
	for _, w := range utils.WORDS {
		long = max(long, len(w))
	}
	return elemBytes + int64(long) + 2
}()

// lipsumParagraphBytes bounds what one paragraph costs beside its words:
// its list and its slot in the result, the full stop, the <p> tags and
// the separator.
const lipsumParagraphBytes = 64

// templateLipsum is Jinja's lipsum(n=5, html=True, min=20, max=100),
// gonja's own once its words and paragraphs are charged to the loop
// steps and its text (n paragraphs of max-min words each, as gonja
// makes them) to the values the rendering builds.
func templateLipsum(e *exec.Evaluator, params *exec.VarArgs) (*exec.Value, error) {
	var n, lo, hi int
	var html bool
	if err := params.Take(
		exec.KeywordArgument("n", exec.AsValue(5), exec.IntArgument(&n)),
		exec.KeywordArgument("html", exec.AsValue(true), exec.BoolArgument(&html)),
		exec.KeywordArgument("min", exec.AsValue(20), exec.IntArgument(&lo)),
		exec.KeywordArgument("max", exec.AsValue(100), exec.IntArgument(&hi)),
	); err != nil {
		return nil, exec.ErrInvalidCall(err)
	}
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	// max-min words a paragraph, in unsigned arithmetic: the
	// difference of two ints may not fit one.
	var words uint64
	if hi > lo {
		words = uint64(hi) - uint64(lo)
	}
	paras := uint64(max(0, n))
	// Each word is a step of work (gonja picks it at random and
	// title-cases it, about a microsecond), as a loop's item is, and
	// each paragraph one: charged to the loop steps first, checked
	// before they multiply. So both products below are small.
	l := loopState(e)
	if l == nil {
		return nil, errNoRenderState
	}
	left := uint64(max(0, l.max-l.steps))
	if words >= left || paras > left/(words+1) || !l.charge(int(paras*(words+1))) {
		l.charge(l.max + 1)
		return nil, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	if err := st.charge(int64(paras) * (lipsumParagraphBytes + int64(words)*lipsumWordBytes)); err != nil {
		return nil, err
	}
	return exec.AsSafeValue(lipsumText(n, html, lo, hi)), nil
}

// lipsumSeed seeds every lipsum() call: the same call writes the same
// text in every rendering. jinja2's lipsum (and gonja's) draws from the
// process's random source, so a template calling it rendered a new
// prompt each time, which Hugging Face cannot reproduce either: no
// rendering could be checked or replayed, and no prefix of the prompt
// past the call was ever found in the prefix cache. Refusing such a
// template at load would turn a call in a branch never taken (or a
// template that only decorates a system prompt) into a model that cannot
// chat; a fixed text keeps it working and reproducible.
const lipsumSeed = 0x6c697073756d // "lipsum"

// lipsumText is gonja's lipsum (n paragraphs of hi-lo words from its
// word list, capitalised after a full stop, commas and full stops at its
// random spacing; as text, or each paragraph in <p></p>, as jinja2 writes
// it) drawn from a source seeded with lipsumSeed. templateLipsum charges
// it before it is made.
func lipsumText(n int, html bool, lo, hi int) string {
	rng := rand.New(rand.NewPCG(lipsumSeed, 0))
	paras := make([]string, 0, max(0, n))
	for range n {
		capital := true
		lastComma, lastStop := 0, 0
		last := ""
		var words []string
		for j := lo; j < hi; j++ {
			w := utils.WORDS[rng.IntN(len(utils.WORDS))]
			for w == last {
				w = utils.WORDS[rng.IntN(len(utils.WORDS))]
			}
			last = w
			if capital && w != "" {
				w = strings.ToUpper(w[:1]) + w[1:]
				capital = false
			}
			if j-(3+rng.IntN(5)) > lastComma {
				lastComma = j
				lastStop += 2
				w += ","
			} else if j-(10+rng.IntN(10)) > lastStop {
				lastComma, lastStop = j, j
				w += "."
				capital = true
			}
			words = append(words, w)
		}
		p := strings.Join(words, " ")
		if strings.HasSuffix(p, ",") {
			p = p[:len(p)-1] + "."
		} else if !strings.HasSuffix(p, ".") {
			p += "."
		}
		if html {
			p = "<p>" + p + "</p>"
		}
		paras = append(paras, p)
	}
	if html {
		return strings.Join(paras, "\n")
	}
	return strings.Join(paras, "\n\n")
}

// strftime formats t with the C directives chat templates use.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
