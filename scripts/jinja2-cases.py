#!/usr/bin/env python3
"""Regenerates the expected renderings in testdata/templates/jinja2-cases.json.

Each case is a chat template (src), its messages (default: one user
message "ab") and optional extra variables (vars). This script renders it
as Hugging Face's apply_chat_template does: jinja2's
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True),
add_generation_prompt true, no bos/eos text, and writes the result into
the case's "want", or the exception's class name into "error" when jinja2
refuses the template (at parse or at rendering). internal/router's
TestChatTemplateAsJinja2 renders each case with sluice and requires the
same text, or a refusal where jinja2 refuses.

Usage: python3 scripts/jinja2-cases.py [testdata/templates/jinja2-cases.json]
(Debian's python3-jinja2; the version used is recorded in the file.)
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

path = sys.argv[1] if len(sys.argv) > 1 else "testdata/templates/jinja2-cases.json"
with open(path, encoding="utf-8") as f:
    doc = json.load(f)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
for case in doc["cases"]:
    case.pop("want", None)
    case.pop("error", None)
    msgs = case.get("messages", [{"role": "user", "content": "ab"}])
    variables = dict(case.get("vars", {}))
    variables.update(messages=msgs, add_generation_prompt=True, bos_token="", eos_token="")
    try:
        case["want"] = env.from_string(case["src"]).render(**variables)
    except Exception as e:  # the refusal is the expectation
        case["error"] = type(e).__name__

doc["generator"] = (
    "scripts/jinja2-cases.py: jinja2 %s (Python %d.%d), "
    "ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) as Hugging Face's apply_chat_template"
    % (jinja2.__version__, sys.version_info[0], sys.version_info[1])
)
with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=1)
    f.write("\n")
