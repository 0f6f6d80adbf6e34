package router

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"sluice/internal/grammar"
	"sluice/internal/sample"
)

// Tool calling (OpenAI's tools / tool_choice).
//
// The tools are rendered by the model's chat template (its `tools`
// variable). How the answer becomes tool_calls depends on tool_choice:
//   - "none": the model answers in text; nothing is parsed.
//   - "auto" (the default with tools): the model answers freely, and its
//     own tool-call format is parsed from the text: Hermes/Qwen
//     `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, or
//     a Llama-3.1 JSON object `{"name": ..., "parameters": {...}}`.
//   - "required", or a named function: the output is grammar-constrained
//     (a JSON Schema built from the tools' parameters), so it is always one
//     valid call whose arguments validate. Named: the output is the
//     arguments object itself; required: {"name": ..., "arguments": ...}
//     with one anyOf branch per tool.
//
// Streamed, a named or required call goes out as it is generated, in
// OpenAI's chunk shape: a first delta.tool_calls chunk with the index, id,
// type and name, then the arguments in fragments (a required call's once
// its name is complete, scanRequired). An auto answer's text is held from
// where it may be a call until the choice ends, then sent the same way, or
// as content if it held no call.

const (
	maxTools        = 64
	maxToolNameLen  = 64
	toolModeNone    = ""
	toolModeAuto    = "auto"
	toolModeReq     = "required"
	toolModeNamed   = "named"
	toolCallIDBytes = 12
)

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

type toolDef struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
}

// template is the tool as chat templates read it, {type, function:
// {name, description, parameters, strict}} (description and strict when
// given), parameters (compacted) with their keys in the client's order
// (chatorder.go).
func (td toolDef) template(params []byte) *jsonObject {
	fn := &jsonObject{}
	fn.set("name", td.Function.Name)
	if td.Function.Description != "" {
		fn.set("description", td.Function.Description)
	}
	p, err := decodeOrdered(params)
	if err != nil {
		p = map[string]any{}
	}
	fn.set("parameters", p)
	if td.Function.Strict != nil {
		fn.set("strict", *td.Function.Strict)
	}
	tool := &jsonObject{}
	tool.set("type", td.Type)
	tool.set("function", fn)
	return tool
}

// toolSpec is a request's validated tools.
type toolSpec struct {
	mode  string
	tools []toolDef
	named string
	// choice is tool_choice in the request's words, for errors:
	// tool_choice "required" with one tool is mode named, but the user
	// named no function.
	choice string
	// render is the tools as the chat template sees them.
	render []any
	// single: parallel_tool_calls false, so an auto answer carries at
	// most its first call (required and named carry one anyway).
	single bool
}

// parseTools validates tools and tool_choice and, for required and named
// choices, returns the output format that constrains the answer.
func parseTools(toolsRaw, choiceRaw json.RawMessage, schemas schemaCheck) (toolSpec, sample.Format, *apiError) {
	var spec toolSpec
	var f sample.Format
	t := strings.TrimSpace(string(toolsRaw))
	if t != "" && t != "null" {
		if err := json.Unmarshal(toolsRaw, &spec.tools); err != nil {
			return spec, f, badParam("tools", "tools must be an array of {type: \"function\", function: {name, description, parameters}}")
		}
	}
	if len(spec.tools) > maxTools {
		return spec, f, badParam("tools", "%d tools; at most %d are allowed", len(spec.tools), maxTools)
	}
	seen := map[string]bool{}
	// usesRef[i]: tool i's parameters follow a $ref (the compiler's
	// word, so a property named "$ref" is none).
	var usesRef []bool
	for i, td := range spec.tools {
		p := fmt.Sprintf("tools[%d]", i)
		if td.Type != "function" {
			return spec, f, unsupported(p+".type", "tool type %q is not supported; only \"function\" is", td.Type)
		}
		if !toolNameRE.MatchString(td.Function.Name) {
			return spec, f, badParam(p+".function.name", "a function name must be 1 to %d letters, digits, '_' or '-'", maxToolNameLen)
		}
		if seen[td.Function.Name] {
			return spec, f, badParam(p+".function.name", "the function name %q is used twice", td.Function.Name)
		}
		seen[td.Function.Name] = true
		if isNull(td.Function.Parameters) {
			spec.tools[i].Function.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, spec.tools[i].Function.Parameters); err != nil {
			return spec, f, badParam(p+".function.parameters", "parameters must be a JSON Schema object")
		}
		spec.tools[i].Function.Parameters = b.Bytes()
		refs, err := schemas.check(b.Bytes())
		if err != nil {
			return spec, f, schemaError(p+".function.parameters", err)
		}
		usesRef = append(usesRef, refs)
		spec.render = append(spec.render, td.template(b.Bytes()))
	}
	spec.mode = toolModeNone
	if len(spec.tools) > 0 {
		spec.mode = toolModeAuto
	}
	if !isNull(choiceRaw) {
		var s string
		if json.Unmarshal(choiceRaw, &s) == nil {
			switch s {
			case "none":
				spec.mode = toolModeNone
			case "auto", "required":
				if len(spec.tools) == 0 {
					return spec, f, badParam("tool_choice", "tool_choice %q needs tools", s)
				}
				spec.mode, spec.choice = s, fmt.Sprintf("tool_choice %q", s)
			default:
				return spec, f, badParam("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
			}
		} else {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(choiceRaw, &named) != nil || named.Type != "function" {
				return spec, f, badParam("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
			}
			if !seen[named.Function.Name] {
				return spec, f, badParam("tool_choice.function.name", "tool_choice names %q, which is not among the tools", named.Function.Name)
			}
			spec.mode, spec.named = toolModeNamed, named.Function.Name
			spec.choice = fmt.Sprintf("a tool_choice naming the function %q", named.Function.Name)
		}
	}
	if spec.mode == toolModeReq && len(spec.tools) == 1 {
		spec.mode, spec.named = toolModeNamed, spec.tools[0].Function.Name
	}
	switch spec.mode {
	case toolModeNamed:
		for _, td := range spec.tools {
			if td.Function.Name == spec.named {
				f = sample.Format{Kind: sample.FormatJSONSchema, Schema: string(td.Function.Parameters)}
			}
		}
	case toolModeReq:
		var b strings.Builder
		b.WriteString(`{"anyOf":[`)
		for i, td := range spec.tools {
			if usesRef[i] {
				// Its "#" pointers would resolve against the anyOf built
				// here, not against the parameters.
				return spec, f, unsupported(fmt.Sprintf("tools[%d].function.parameters", i), "$ref in a function's parameters is not supported with tool_choice \"required\" and several tools; name the function in tool_choice")
			}
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(td.Function.Name)
			fmt.Fprintf(&b, `{"type":"object","properties":{"name":{"const":%s},"arguments":%s},"required":["name","arguments"],"additionalProperties":false}`, name, td.Function.Parameters)
		}
		b.WriteString(`]}`)
		if _, err := schemas.check([]byte(b.String())); err != nil {
			return spec, f, schemaError("tools", err)
		}
		f = sample.Format{Kind: sample.FormatJSONSchema, Schema: b.String()}
	}
	return spec, f, nil
}

// schemaCheck checks a request's schemas (response_format's, the tools'
// parameters) for the tenant that sent them: through the server's cache
// of checks (grammar.Checks, keyed by tenant and schema text), or, with
// no cache (tests), by compiling each. usesRef: the schema follows a $ref.
// ctx is the request's: a check waiting for a concurrent compile of the
// same schema stops when the request ends (context.Canceled).
type schemaCheck struct {
	cache  *grammar.Checks
	tenant string
	ctx    context.Context
}

func (sc schemaCheck) check(schema []byte) (usesRef bool, err error) {
	if sc.cache != nil {
		usesRef, _, err = sc.cache.Check(sc.ctx, sc.tenant, schema)
		return usesRef, err
	}
	g, err := grammar.CompileSchema(schema)
	if err != nil {
		return false, err
	}
	return g.UsesRef(), nil
}

// schemaError is the 400 for a schema the grammar compiler refuses: its
// code names the limit or the problem. A check cut short by the end of its
// request is the 499 of a client that went away.
func schemaError(param string, err error) *apiError {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return newErr(statusClientGone, CodeClientGone, param, "the request ended while its schema was being checked")
	}
	code := "invalid_schema"
	var ge *grammar.Error
	if errors.As(err, &ge) {
		code = ge.Code
	}
	return newErr(http.StatusBadRequest, code, param, "%v", err)
}

// toolCallJSON is OpenAI's message.tool_calls[] item.
type toolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func newToolCallID() string {
	var b [toolCallIDBytes]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

var hermesRE = regexp.MustCompile(`(?s)<tool_call>\s*(\{.*?\})\s*</tool_call>`)

// toolCalls turns a finished choice's text into tool calls for spec's
// mode, with the content that is left (nil: none). ok is false when the
// text holds no call (auto: the answer is plain content).
func (spec *toolSpec) toolCalls(text string) (calls []toolCallJSON, content *string, ok bool) {
	call := func(name string, args json.RawMessage) toolCallJSON {
		var tc toolCallJSON
		tc.ID, tc.Type = newToolCallID(), "function"
		tc.Function.Name = name
		// The model's own text, as OpenAI returns it (and as a stream
		// sends it, fragment by fragment).
		tc.Function.Arguments = strings.TrimSpace(string(args))
		return tc
	}
	type nameArgs struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	known := func(n string) bool {
		for _, td := range spec.tools {
			if td.Function.Name == n {
				return true
			}
		}
		return false
	}
	parse := func(s string, unwrap bool) (toolCallJSON, bool) {
		var na nameArgs
		if json.Unmarshal([]byte(s), &na) != nil || !known(na.Name) {
			return toolCallJSON{}, false
		}
		args := na.Arguments
		if isNull(args) {
			args = na.Parameters
		}
		if isNull(args) {
			args = json.RawMessage(`{}`)
		}
		// Some models write the arguments as a JSON string: an auto
		// call's string that holds JSON is taken as that JSON. Not
		// otherwise: arguments that are not JSON break every client
		// (json.loads), and a required call's arguments are its
		// parameters' value as the grammar wrote it (a string parameter
		// stays a string, as its stream sent it).
		var str string
		if unwrap && json.Unmarshal(args, &str) == nil && json.Valid([]byte(str)) {
			args = json.RawMessage(str)
		}
		return call(na.Name, args), true
	}
	switch spec.mode {
	case toolModeNamed:
		if !json.Valid([]byte(text)) {
			return nil, nil, false
		}
		return []toolCallJSON{call(spec.named, json.RawMessage(text))}, nil, true
	case toolModeReq:
		if tc, ok := parse(text, false); ok {
			return []toolCallJSON{tc}, nil, true
		}
		return nil, nil, false
	case toolModeAuto:
		if m := hermesRE.FindAllStringSubmatchIndex(text, -1); len(m) > 0 {
			for _, x := range m {
				if tc, ok := parse(text[x[2]:x[3]], true); ok {
					calls = append(calls, tc)
				}
			}
			if len(calls) > 0 {
				if spec.single {
					calls = calls[:1]
				}
				// The text before the first call, as a stream sends it.
				if pre := text[:m[0][0]]; strings.TrimSpace(pre) != "" {
					content = &pre
				}
				return calls, content, true
			}
		}
		trimmed := strings.TrimSpace(text)
		trimmed = strings.TrimPrefix(trimmed, "<|python_tag|>")
		if strings.HasPrefix(trimmed, "{") {
			if tc, ok := parse(trimmed, true); ok {
				return []toolCallJSON{tc}, nil, true
			}
		}
	}
	return nil, nil, false
}
