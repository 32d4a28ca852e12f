"""Renders chat templates as transformers' apply_chat_template does (Jinja2, sandboxed, with
trim_blocks and lstrip_blocks, its tojson, raise_exception and strftime_now). Reads
[{"template": ..., "data": {...}}] on stdin, writes the rendered strings as a JSON list."""
import json
import sys
from datetime import datetime

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise ValueError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

jobs = json.load(sys.stdin)
cache = {}
out = []
for job in jobs:
    t = cache.get(job["template"])
    if t is None:
        t = cache[job["template"]] = env.from_string(job["template"])
    rendered = t.render(**job["data"])
    if job.get("continue_final_message"):
        # transformers' apply_chat_template: end at the final message's content.
        final = job["data"]["messages"][-1]["content"]
        try:
            rendered = rendered[: rendered.rindex(final) + len(final)]
        except ValueError:
            final = final.strip()
            rendered = rendered[: rendered.rindex(final) + len(final)]
    out.append(rendered)
json.dump(out, sys.stdout, ensure_ascii=False)
