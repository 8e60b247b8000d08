"""How ``tidelog produce`` turns a line into a record, as kafka-console-producer's ``LineMessageReader`` does with
its ``--property`` settings: ``parse.key`` with ``key.separator`` (default a tab), ``parse.headers`` with
``headers.delimiter`` (default a tab, between the headers and the rest), ``headers.separator`` (default ``,``,
between headers) and ``headers.key.separator`` (default ``:``), ``null.marker`` (a key, value or header value
equal to it is null) and ``ignore.error`` (a line without the separators is taken whole instead of failing).

A line with headers: ``h1:v1,h2:v2<TAB>key<TAB>value``."""

from __future__ import annotations

from dataclasses import dataclass

Header = tuple[str, bytes | None]

_BOOLS = {"true": True, "false": False}
KNOWN = ("parse.key", "key.separator", "parse.headers", "headers.delimiter", "headers.separator",
         "headers.key.separator", "null.marker", "ignore.error")


class LineError(ValueError):
    """A line the settings cannot split (Kafka's KafkaException "No key separator found on line number N")."""


def unescape(sep: str) -> str:
    """``\\t`` written on a command line means a tab."""
    return sep.encode("utf-8").decode("unicode_escape") if "\\" in sep else sep


@dataclass(frozen=True)
class LineReader:
    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineReader:
        """Kafka's property names; an unknown name or a bad boolean is a ValueError naming it."""
        unknown = sorted(set(props) - set(KNOWN))
        if unknown:
            raise ValueError(f"unknown --property {', '.join(unknown)} (known: {', '.join(KNOWN)})")

        def flag(name: str) -> bool:
            value = props.get(name, "false").strip().lower()
            if value not in _BOOLS:
                raise ValueError(f"--property {name}={props[name]}: expected true or false")
            return _BOOLS[value]

        def sep(name: str, default: str) -> bytes:
            value = unescape(props.get(name, default))
            if not value:
                raise ValueError(f"--property {name}: the separator cannot be empty")
            return value.encode("utf-8")

        marker = props.get("null.marker")
        return cls(flag("parse.key"), sep("key.separator", "\t"), flag("parse.headers"),
                   sep("headers.delimiter", "\t"), sep("headers.separator", ","), sep("headers.key.separator", ":"),
                   None if marker is None or marker == "" else marker.encode("utf-8"), flag("ignore.error"))

    def _null(self, b: bytes) -> bytes | None:
        return None if self.null_marker is not None and b == self.null_marker else b

    def read(self, line: bytes, lineno: int) -> tuple[bytes | None, bytes | None, list[Header] | None]:
        """``(key, value, headers)`` of one line (headers None when not parsed)."""
        rest = line
        headers: list[Header] | None = None
        if self.parse_headers:
            head, found, after = rest.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise LineError(f"no headers delimiter found on line number {lineno}: '{line.decode(errors='replace')}'")
            else:
                rest = after
                headers = []
                for item in head.split(self.headers_separator) if head else []:
                    name, has, value = item.partition(self.headers_key_separator)
                    if not has:
                        raise LineError(f"no header key separator found in pair '{item.decode(errors='replace')}' "
                                        f"on line number {lineno}")
                    headers.append((name.decode("utf-8", errors="replace"), self._null(value)))
        key: bytes | None = None
        if self.parse_key:
            k, found, value = rest.partition(self.key_separator)
            if found:
                return self._null(k), self._null(value), headers
            if not self.ignore_error:
                raise LineError(f"no key separator found on line number {lineno}: '{line.decode(errors='replace')}'")
        return key, self._null(rest), headers
