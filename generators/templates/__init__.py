"""jinja2 templates of the generated text artefacts (datasheets, reports)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

#: The directory of the templates.
DIRECTORY = Path(__file__).parent


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(DIRECTORY)),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(name: str, context: dict) -> str:
    return environment().get_template(name).render(**context)
