"""The type of every path option and argument of the command line: a path of the wrong kind is a user
error (exit 1, one line naming the option and the fix), not a mistyped command line (exit 2).

click checks ``file_okay``/``dir_okay`` itself and reports a folder given for a file as a usage error;
but the same command line works once that folder is gone: it is the machine's state that is wrong.
"""

from __future__ import annotations

import os
from typing import Any

import click

from bertwb.errors import BertwbError


class PathArg(click.Path):
    """`click.Path`, with a folder where a file belongs (or a file where a folder belongs) a `BertwbError`."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            name = (max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name) \
                if param else "the path"
            if not self.dir_okay and os.path.isdir(value):
                raise BertwbError(f"{name} {value} is a folder, where a file belongs; give the path of a file") \
                    from None
            if not self.file_okay and os.path.exists(value):
                raise BertwbError(f"{name} {value} is a file, where a folder belongs; give the path of a folder") \
                    from None
            raise exc
