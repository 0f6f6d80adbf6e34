#!/usr/bin/env python3
"""Regenerates the expected renderings in testdata/templates/jinja2-tools-cases.json.

Each case is a chat template (a file of testdata/templates named by
"template", or the text "src") and a request "body": the JSON text of an
OpenAI request's messages, tools and chat_template_kwargs as a client
writes them (keys deliberately not in sorted order; numbers such as 1.0,
1E2, 1e21 and 12345678901234567890 as written, which is why the body is
a string). This script renders it as
Hugging Face's apply_chat_template does (transformers'
_compile_jinja_template: jinja2's ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; its own tojson, which is
json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
sort_keys=sort_keys); raise_exception; strftime_now), with the request
turned into template variables the way sluice (and vLLM) do:

  - a message is {role, content, tool_calls?, tool_call_id?, name?}, the
    developer role is system, null content is "";
  - a tool call is {id, type: "function", function: {name, arguments}},
    its arguments string parsed when it is a JSON object (vLLM does the
    same; a string that is not one stays a string);
  - a tool is {type, function: {name, description?, parameters, strict?}},
    parameters {"type": "object", "properties": {}} when absent.

Dicts keep the order the JSON wrote (json.load), as in Python. The
result goes into the case's "want", or the exception's class name into
"error". internal/router's TestChatTemplateToolsAsHF feeds each case's
JSON through sluice's request parsing and rendering and requires the
same text byte for byte.

Usage: python3 scripts/jinja2-tools-cases.py [testdata/templates/jinja2-tools-cases.json]
(Debian's python3-jinja2; the version used is recorded in the file.)
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

path = sys.argv[1] if len(sys.argv) > 1 else "testdata/templates/jinja2-tools-cases.json"
with open(path, encoding="utf-8") as f:
    doc = json.load(f)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now


def template_message(m):
    out = {"role": "system" if m["role"] == "developer" else m["role"]}
    c = m.get("content")
    if isinstance(c, list):
        c = "".join(p["text"] for p in c)
    out["content"] = c if c is not None else ""
    calls = []
    for tc in m.get("tool_calls") or []:
        args = tc["function"]["arguments"]
        try:
            parsed = json.loads(args)
            if isinstance(parsed, dict):
                args = parsed
        except ValueError:
            pass
        calls.append({"id": tc.get("id", ""), "type": "function", "function": {"name": tc["function"]["name"], "arguments": args}})
    if calls:
        out["tool_calls"] = calls
    if out["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id", "")
    if m.get("name"):
        out["name"] = m["name"]
    return out


def template_tool(t):
    fn = t["function"]
    f = {"name": fn["name"]}
    if fn.get("description"):
        f["description"] = fn["description"]
    f["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
    if fn.get("strict") is not None:
        f["strict"] = fn["strict"]
    return {"type": t["type"], "function": f}


here = os.path.dirname(os.path.abspath(path))
for case in doc["cases"]:
    case.pop("want", None)
    case.pop("error", None)
    if "template" in case:
        with open(os.path.join(here, case["template"]), encoding="utf-8") as f:
            src = f.read()
    else:
        src = case["src"]
    req = json.loads(case["body"])
    variables = dict(req.get("chat_template_kwargs") or {})
    variables.update(
        messages=[template_message(m) for m in req["messages"]],
        add_generation_prompt=True,
        bos_token="",
        eos_token="",
    )
    if req.get("tools"):
        variables["tools"] = [template_tool(t) for t in req["tools"]]
    try:
        case["want"] = env.from_string(src).render(**variables)
    except Exception as e:  # the refusal is the expectation
        case["error"] = type(e).__name__

doc["generator"] = (
    "scripts/jinja2-tools-cases.py: jinja2 %s (Python %d.%d), transformers' chat template environment "
    "(ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loopcontrols, its tojson)"
    % (jinja2.__version__, sys.version_info[0], sys.version_info[1])
)
with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=1)
    f.write("\n")
