package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strings"
)

// Bounds of chat_template_kwargs, documented in docs/api.md: like every
// input, what a request may hand the template is bounded, so a template
// cannot be made to loop or allocate without limit by what it is given.
const (
	maxKwargsBytes  = 16 << 10 // the JSON object as sent
	maxKwargsKeys   = 32       // top-level variables
	maxKwargsValues = 256      // every value, nested ones included
	maxKwargsDepth  = 4        // nesting of objects and arrays
	maxKwargsNumber = 1 << 20  // |n| of any number (range(n) in a template)
)

var kwargName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// parseTemplateKwargs reads chat_template_kwargs (vLLM's parameter: extra
// variables for the chat template, e.g. {"enable_thinking": false} for
// Qwen3): a JSON object of bounded size whose keys are template variable
// names other than those the server sets (ReservedTemplateVars). Numbers
// become int when whole, float64 otherwise; null, absent.
func parseTemplateKwargs(raw json.RawMessage) (map[string]any, *apiError) {
	const param = "chat_template_kwargs"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) > maxKwargsBytes {
		return nil, badParam(param, "%s is %d bytes; at most %d are allowed", param, len(raw), maxKwargsBytes)
	}
	// In the client's key order (chatorder.go): a variable's nested
	// objects reach the template as json.loads gives them to jinja2.
	v, err := decodeOrdered(raw)
	if err != nil {
		return nil, badParam(param, "%s is not valid JSON: %v", param, err)
	}
	o, ok := v.(*jsonObject)
	if !ok {
		return nil, badParam(param, "%s must be a JSON object of template variables, e.g. {\"enable_thinking\": false}", param)
	}
	obj := o.vals
	if len(obj) > maxKwargsKeys {
		return nil, badParam(param, "%s has %d keys; at most %d are allowed", param, len(obj), maxKwargsKeys)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	count := 0
	out := make(map[string]any, len(obj))
	for _, k := range keys {
		if !kwargName.MatchString(k) {
			return nil, badParam(param, "%s key %q is not a template variable name (letters, digits and _, not starting with a digit, at most 64)", param, k)
		}
		if ReservedTemplateVars[k] {
			return nil, badParam(param, "%s key %q is set by the server and cannot be replaced", param, k)
		}
		cv, e := convertKwarg(obj[k], param+"."+k, 1, &count)
		if e != nil {
			return nil, e
		}
		out[k] = cv
	}
	return out, nil
}

// convertKwarg turns decoded JSON into template values, counting and
// bounding as it goes.
func convertKwarg(v any, path string, depth int, count *int) (any, *apiError) {
	const param = "chat_template_kwargs"
	*count++
	if *count > maxKwargsValues {
		return nil, badParam(param, "%s holds more than %d values", param, maxKwargsValues)
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case int:
		if x > maxKwargsNumber || x < -maxKwargsNumber {
			return nil, badParam(param, "%s is %d; numbers are bounded to ±%d", path, x, maxKwargsNumber)
		}
		return x, nil
	case pyBigInt:
		return nil, badParam(param, "%s is %s; numbers are bounded to ±%d", path, x, maxKwargsNumber)
	case float64:
		if math.IsNaN(x) || math.Abs(x) > maxKwargsNumber {
			return nil, badParam(param, "%s is %v; numbers are bounded to ±%d", path, x, maxKwargsNumber)
		}
		return x, nil
	case []any, *jsonObject:
		if depth >= maxKwargsDepth {
			return nil, badParam(param, "%s nests deeper than %d levels", path, maxKwargsDepth)
		}
		if a, ok := x.([]any); ok {
			out := make([]any, len(a))
			for i, e := range a {
				c, err := convertKwarg(e, fmt.Sprintf("%s[%d]", path, i), depth+1, count)
				if err != nil {
					return nil, err
				}
				out[i] = c
			}
			return out, nil
		}
		m := x.(*jsonObject)
		out := &jsonObject{}
		for _, k := range m.keys {
			c, err := convertKwarg(m.vals[k], path+"."+k, depth+1, count)
			if err != nil {
				return nil, err
			}
			out.set(k, c)
		}
		return out, nil
	}
	return nil, badParam(param, "%s has a value of an unknown type", path)
}

// reasoningEffort hands reasoning_effort (already one of OpenAI's values)
// to the chat template in kwargs. Only a template can honour it: one that
// reads reasoning_effort gets it as that variable (as SGLang passes it;
// gpt-oss's template reads it); one that only switches thinking
// (enable_thinking, Qwen3's) gets "none" as thinking off, the one effort it
// can express; any other template, or effort, is refused naming the field,
// since the output would not be what was asked for. chat_template_kwargs
// may not say otherwise.
func (s *Server) reasoningEffort(effort string, kwargs map[string]any) (map[string]any, *apiError) {
	const param = "reasoning_effort"
	set := func(name string, v any) (map[string]any, *apiError) {
		if old, ok := kwargs[name]; ok && old != v {
			return nil, badParam(param, "reasoning_effort %q and chat_template_kwargs.%s %v disagree; set only one", effort, name, old)
		}
		if kwargs == nil {
			kwargs = map[string]any{}
		}
		kwargs[name] = v
		return kwargs, nil
	}
	switch {
	case s.chat.Reads("reasoning_effort"):
		return set("reasoning_effort", effort)
	case s.chat.Reads("enable_thinking") && effort == "none":
		return set("enable_thinking", false)
	case s.chat.Reads("enable_thinking"):
		return nil, unsupported(param, "reasoning_effort %q cannot be honoured: this model's chat template only switches thinking on or off (enable_thinking); send reasoning_effort \"none\" or chat_template_kwargs {\"enable_thinking\": false} to turn it off, or leave it out", effort)
	}
	return nil, unsupported(param, "reasoning_effort cannot be honoured: this model's chat template has no reasoning effort or thinking switch; remove reasoning_effort")
}

func isTemplateRaise(err error) bool { return errors.Is(err, errTemplateRaised) }

// chatText turns a request's raw messages and chat_template_kwargs into the
// prompt text through the chat template (o.Kwargs is set here), and says
// whether BOS must still be added: the template usually writes BOS itself,
// and the prompt must never carry two. Chat completions and /tokenize both
// use it, so /tokenize's count is the chat request's prompt_tokens.
func (s *Server) chatText(rawMsgs, rawKwargs json.RawMessage, effort *string, o RenderOptions) (string, bool, *apiError) {
	msgs, e := parseMessages(rawMsgs)
	if e != nil {
		return "", false, e
	}
	if o.Kwargs, e = parseTemplateKwargs(rawKwargs); e != nil {
		return "", false, e
	}
	if effort != nil {
		if o.Kwargs, e = s.reasoningEffort(*effort, o.Kwargs); e != nil {
			return "", false, e
		}
	}
	text, e := s.renderChat(msgs, o)
	if e != nil {
		return "", false, e
	}
	return text, s.cfg.BOSText == "" || !strings.HasPrefix(text, s.cfg.BOSText), nil
}

// renderChat renders msgs with the request's template options, sorting
// the failure: the template's own raise_exception is the client's (400);
// a failure that happens only with the request's kwargs is the kwargs'
// (400, naming them); a rendering past MaxRenderBytes is the input's
// (400: no context holds it), as is one whose loops go over more than
// maxLoopSteps items (chatloops.go); any other is the template's (500,
// logged).
//
// Whose failure it is when kwargs were given is found by rendering again
// without them (tools and the rest unchanged), within what the first
// rendering left of the request's budgets (one renderState): the look
// costs no more than one rendering may, and past the budgets it is
// answered as any rendering past them.
func (s *Server) renderChat(msgs []ChatMessage, o RenderOptions) (string, *apiError) {
	st := s.chat.newRenderState()
	text, err := s.chat.renderIn(st, msgs, o)
	if err == nil {
		return text, nil
	}
	if e := renderRefusal(err); e != nil {
		return "", e
	}
	if len(o.Kwargs) > 0 {
		without := o
		without.Kwargs = nil
		_, plain := s.chat.renderIn(st, msgs, without)
		if plain == nil {
			return "", newErr(http.StatusBadRequest, CodeTemplate, "chat_template_kwargs", "the model's chat template cannot render with these chat_template_kwargs (it renders without them): %v", err)
		}
		if errors.Is(plain, ErrRenderTooLarge) || errors.Is(plain, ErrTemplateTooMuchWork) {
			return "", renderRefusal(plain)
		}
	}
	s.log.Error("chat template failed", "err", err)
	return "", newErr(http.StatusInternalServerError, CodeTemplate, "", "the model's chat template failed to render")
}

// renderRefusal is the client's 400 for a rendering the template refused
// (raise_exception) or the bounds stopped; nil for any other failure.
func renderRefusal(err error) *apiError {
	switch {
	case isTemplateRaise(err):
		return newErr(http.StatusBadRequest, CodeTemplate, "messages", "the model's chat template rejected the messages: %s", strings.TrimPrefix(err.Error(), errTemplateRaised.Error()+": "))
	case errors.Is(err, ErrRenderTooLarge):
		return newErr(http.StatusBadRequest, CodeContextLength, "messages", "%v: shorten the messages or tools", err)
	case errors.Is(err, ErrTemplateTooMuchWork):
		return newErr(http.StatusBadRequest, CodeTemplate, "messages", "%v: send fewer messages or tools", err)
	}
	return nil
}
