"""Compile a Kafka message spec, for one version, into specialised Python decode/encode functions.

For each (spec, version) we generate the source of a handful of plain functions — one per struct —
and ``exec`` it once. The generated code works on plain dicts with snake_case keys:

* decode: ``fn(buf: memoryview, pos: int) -> (dict, pos)``. Every length and count is checked against
  the bytes remaining *before* anything is sliced or a loop starts (KAFKA-14063 / CVE-2022-34917), so a
  lying length can never make us allocate more than the frame. A short buffer surfaces as
  ``struct.error`` / ``IndexError`` / ``InvalidRequestError``; bad UTF-8 as ``UnicodeDecodeError`` —
  the caller (``codec``) maps all of them to ``InvalidRequestError``. ``records`` fields come out as
  memoryview slices of the frame (zero copy).
* encode: ``fn(body: dict, parts: list) -> None`` appends bytes to ``parts``. Missing keys take the
  schema default. Flexible versions get an empty tagged-field section unless a tagged field holds a
  non-default value. A ``records`` value may be bytes-like, None, or a ``RecordsChunks``; the latter (and
  large bytes) are appended as ``ZERO_COPY, chunks, size`` triples that ``codec`` turns into separate
  output chunks without copying.

Consecutive fixed-width fields are read/written with one precompiled ``struct.Struct`` call.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tidelog.protocol.exceptions import EncodeError, InvalidRequestError
from tidelog.protocol.schema import (
    FIXED_FORMATS,
    FIXED_SIZES,
    ZERO_UUID,
    FieldSpec,
    MessageSpec,
    field_default,
    in_range,
)
from tidelog.records.varint import ONE_BYTE, encode_unsigned

# ------------------------------------------------------------------------------------ runtime helpers

ZERO_COPY = object()
"""Marker in an encoder's parts list: the next two items are a list of chunks and their total size."""

ZERO_COPY_MIN = 32 * 1024
"""bytes-like records of at least this size are passed through as their own chunk, not joined."""

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_UV1 = ONE_BYTE


class FileRegionLike(Protocol):
    """A region of a file the server sends with os.sendfile; only ``length`` matters to the codec."""

    @property
    def length(self) -> int: ...


class RecordsChunks:
    """A records field value made of chunks sent untouched: bytes-like objects and file regions.

    ``size`` is the total length (it becomes the records length prefix); each chunk is bytes-like or a
    ``FileRegionLike`` object with a ``.length`` attribute (e.g. (fd, position, length) for os.sendfile).
    """

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: list[Any], size: int | None = None) -> None:
        self.chunks = chunks
        if size is None:
            size = 0
            for c in chunks:
                n = getattr(c, "length", None)
                size += len(c) if n is None else n
        self.size = size

    def __repr__(self) -> str:
        return f"RecordsChunks(size={self.size}, chunks={len(self.chunks)})"


def _uvar_rest(buf: memoryview, pos: int, b0: int) -> tuple[int, int]:
    """Continue an unsigned varint whose first byte ``b0`` had the continuation bit set (max 5 bytes)."""
    result = b0 & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise InvalidRequestError("unsigned varint longer than 5 bytes")


def uvarint(n: int) -> bytes:
    if n < 128:
        if n < 0:
            raise EncodeError(f"negative unsigned varint {n}")
        return _UV1[n]
    return encode_unsigned(n)


def _uuid_bytes(x: Any) -> bytes:
    if isinstance(x, uuid.UUID):
        return x.bytes
    b = bytes(x)
    if len(b) != 16:
        raise EncodeError("uuid must be a uuid.UUID or 16 bytes")
    return b


def _records_len(x: Any) -> int:
    return x.nbytes if isinstance(x, memoryview) else len(x)


def _enc_records(x: Any, w: list[Any], compact: bool, nullable: bool) -> None:
    if x is None:
        if not nullable:
            raise EncodeError("records field is not nullable in this version")
        w.append(b"\x00" if compact else b"\xff\xff\xff\xff")
        return
    if isinstance(x, RecordsChunks):
        n = x.size
        w.append(uvarint(n + 1) if compact else _I32.pack(n))
        w.append(ZERO_COPY)
        w.append(x.chunks)
        w.append(n)
        return
    n = _records_len(x)
    w.append(uvarint(n + 1) if compact else _I32.pack(n))
    if n >= ZERO_COPY_MIN:
        w.append(ZERO_COPY)
        w.append([x])
        w.append(n)
    elif n:
        w.append(x)


def _enc_records_compact(x: Any, w: list[Any]) -> None:
    _enc_records(x, w, True, True)


def _enc_records_plain(x: Any, w: list[Any]) -> None:
    _enc_records(x, w, False, True)


def _enc_records_compact_nn(x: Any, w: list[Any]) -> None:
    _enc_records(x, w, True, False)


def _enc_records_plain_nn(x: Any, w: list[Any]) -> None:
    _enc_records(x, w, False, False)


def _copy_default(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _copy_default(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy_default(v) for v in x]
    return x


def _struct_is_default(x: Any, d: dict[str, Any]) -> bool:
    if not isinstance(x, dict):
        return False
    return all(k not in d or d[k] == v for k, v in x.items())


def _unsupported_field(key: str, version: int) -> None:
    raise EncodeError(f"field {key!r} is set to a non-default value but version {version} cannot carry it")


_BASE_NS: dict[str, Any] = {
    "_uvar_rest": _uvar_rest,
    "_uv": uvarint,
    "_UV1": _UV1,
    "_Bad": InvalidRequestError,
    "_EncErr": EncodeError,
    "_UUID": uuid.UUID,
    "_ub": _uuid_bytes,
    "_ZU": ZERO_UUID,
    "_I8": _I8,
    "_I16": _I16,
    "_I32": _I32,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_copy": _copy_default,
    "_isdef": _struct_is_default,
    "_unsup": _unsupported_field,
    "_rec_c": _enc_records_compact,
    "_rec_p": _enc_records_plain,
    "_rec_cn": _enc_records_compact_nn,
    "_rec_pn": _enc_records_plain_nn,
    "_ZC": ZERO_COPY,
    "_ZCMIN": ZERO_COPY_MIN,
}

# ----------------------------------------------------------------------------------------- generator


def _is_fixed(f: FieldSpec) -> bool:
    return not f.is_array and not f.is_struct and f.type in FIXED_FORMATS


class _Gen:
    """Generates the source for one (spec, version)."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.v = version
        self.flex = flexible
        self.ns: dict[str, Any] = dict(_BASE_NS)
        self.funcs: list[str] = []
        self._n = 0
        self._structs: dict[str, str] = {}
        self._consts: dict[int, str] = {}
        self._min_sizes: dict[int, int] = {}

    # -- naming / constants
    def name(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def struct(self, fmt: str) -> str:
        key = "S:" + fmt
        if key not in self._structs:
            n = self.name("_S")
            self.ns[n] = struct.Struct(fmt)
            self._structs[key] = n
        return self._structs[key]

    def const(self, value: Any) -> str:
        if value is None or isinstance(value, bool | int | float | str | bytes):
            return repr(value)
        if isinstance(value, list) and not value:
            return "()"
        if value is ZERO_UUID:
            return "_ZU"
        n = self.name("_D")
        self.ns[n] = value
        return n

    # -- per-field properties
    def compact(self, f: FieldSpec) -> bool:
        if not self.flex:
            return False
        return f.flexible_versions is None or in_range(self.v, f.flexible_versions)

    def is_tagged(self, f: FieldSpec) -> bool:
        return self.flex and f.tagged(self.v)

    def min_size(self, fields: list[FieldSpec]) -> int:
        key = id(fields)
        if key in self._min_sizes:
            return self._min_sizes[key]
        s = 0
        for f in fields:
            if not f.present(self.v) or self.is_tagged(f):
                continue
            s += self.value_min_size(f)
        if self.flex:
            s += 1
        self._min_sizes[key] = s
        return s

    def value_min_size(self, f: FieldSpec) -> int:
        c = self.compact(f)
        if f.is_array:
            return 1 if c else 4
        if f.is_struct:
            return 1 if f.nullable(self.v) else self.min_size(f.fields)
        return self.elem_min_size(f)

    def elem_min_size(self, f: FieldSpec) -> int:
        if f.is_struct:
            return max(1, self.min_size(f.fields))
        if f.type in FIXED_SIZES:
            return FIXED_SIZES[f.type]
        if f.type == "string":
            return 1 if self.compact(f) else 2
        return 1 if self.compact(f) else 4  # bytes, records

    # ------------------------------------------------------------------------------------- decoding
    def read_len(self, ind: str, var: str, compact: bool, width: str) -> list[str]:
        """Lines reading a length/count into ``var`` (compact: uvarint - 1; else int16/int32)."""
        if compact:
            return [
                f"{ind}{var} = buf[pos]",
                f"{ind}pos += 1",
                f"{ind}if {var} & 0x80:",
                f"{ind}    {var}, pos = _uvar_rest(buf, pos, {var})",
                f"{ind}{var} -= 1",
            ]
        s = "_I16" if width == "h" else "_I32"
        return [f"{ind}{var}, = {s}.unpack_from(buf, pos)", f"{ind}pos += {2 if width == 'h' else 4}"]

    def dec_value(self, f: FieldSpec, var: str, ind: str, elem: bool = False) -> list[str]:
        """Lines decoding one value of ``f`` (its element if ``elem``) into ``var``."""
        v = self.v
        nullable = f.nullable(v)
        if f.is_array and not elem:
            return self.dec_array(f, var, ind)
        if f.is_struct:
            fn = self.gen_decoder(f.fields)
            if nullable and not elem:
                return [
                    f"{ind}{var}, = _I8.unpack_from(buf, pos)",
                    f"{ind}pos += 1",
                    f"{ind}if {var} < 0:",
                    f"{ind}    {var} = None",
                    f"{ind}else:",
                    f"{ind}    {var}, pos = {fn}(buf, pos)",
                ]
            return [f"{ind}{var}, pos = {fn}(buf, pos)"]
        t = f.type
        if t in FIXED_FORMATS:
            s = self.struct(">" + FIXED_FORMATS[t])
            lines = [f"{ind}{var}, = {s}.unpack_from(buf, pos)", f"{ind}pos += {FIXED_SIZES[t]}"]
            if t == "uuid":
                lines.append(f"{ind}{var} = _UUID(bytes={var})")
            return lines
        compact = self.compact(f)
        lines = self.read_len(ind, "n", compact, "h" if t == "string" else "i")
        if t == "string":
            make = "str(buf[pos:e], 'utf-8')"
        elif t == "bytes":
            make = "bytes(buf[pos:e])"
        else:  # records
            make = "buf[pos:e]"
        lines.append(f"{ind}if n < 0:")
        if nullable and not elem:
            lines.append(f"{ind}    {var} = None")
        else:
            lines.append(f"{ind}    raise _Bad('null value in non-nullable field {f.name}')")
        lines += [
            f"{ind}else:",
            f"{ind}    e = pos + n",
            f"{ind}    if e > blen:",
            f"{ind}        raise _Bad('field {f.name}: length exceeds the remaining bytes')",
            f"{ind}    {var} = {make}",
            f"{ind}    pos = e",
        ]
        return lines

    def dec_array(self, f: FieldSpec, var: str, ind: str) -> list[str]:
        compact = self.compact(f)
        lines = self.read_len(ind, "c", compact, "i")
        lines.append(f"{ind}if c < 0:")
        if f.nullable(self.v):
            lines.append(f"{ind}    {var} = None")
        else:
            lines.append(f"{ind}    raise _Bad('null array in non-nullable field {f.name}')")
        ms = self.elem_min_size(f)
        lines += [
            f"{ind}else:",
            f"{ind}    if c * {ms} > blen - pos:",
            f"{ind}        raise _Bad('array {f.name}: count exceeds the remaining bytes')",
        ]
        ind2 = ind + "    "
        if f.is_struct:
            fn = self.gen_decoder(f.fields)
            lines += [
                f"{ind2}{var} = []",
                f"{ind2}for _ in range(c):",
                f"{ind2}    x, pos = {fn}(buf, pos)",
                f"{ind2}    {var}.append(x)",
            ]
        elif f.type in FIXED_FORMATS and f.type != "uuid":
            ch = FIXED_FORMATS[f.type]
            lines += [
                f"{ind2}{var} = list(_unpack_from('>%d{ch}' % c, buf, pos))",
                f"{ind2}pos += c * {FIXED_SIZES[f.type]}",
            ]
        else:
            fn = self.gen_value_decoder(f)
            lines += [
                f"{ind2}{var} = []",
                f"{ind2}for _ in range(c):",
                f"{ind2}    x, pos = {fn}(buf, pos)",
                f"{ind2}    {var}.append(x)",
            ]
        return lines

    def gen_value_decoder(self, f: FieldSpec, elem: bool = True) -> str:
        """A function decoding one value of ``f`` (an array element if ``elem``): (buf, pos) -> (v, pos)."""
        fn = self.name("_dv")
        body = self.dec_value(f, "r", "    ", elem=elem)
        self.funcs.append("\n".join([f"def {fn}(buf, pos):", "    blen = len(buf)", *body, "    return r, pos"]))
        return fn

    def gen_decoder(self, fields: list[FieldSpec]) -> str:
        fn = self.name("_d")
        v = self.v
        lines = [f"def {fn}(buf, pos):", "    blen = len(buf)"]
        out: list[tuple[str, str]] = []
        present = [f for f in fields if f.present(v)]
        regular = [f for f in present if not self.is_tagged(f)]
        tagged = sorted((f for f in present if self.is_tagged(f)), key=lambda f: f.tag or 0)
        i = 0
        while i < len(regular):
            f = regular[i]
            if _is_fixed(f):
                run = [f]
                while i + len(run) < len(regular) and _is_fixed(regular[i + len(run)]):
                    run.append(regular[i + len(run)])
                names = [self.name("v") for _ in run]
                s = self.struct(">" + "".join(FIXED_FORMATS[r.type] for r in run))
                size = sum(FIXED_SIZES[r.type] for r in run)
                lines.append(f"    {', '.join(names)}, = {s}.unpack_from(buf, pos)")
                lines.append(f"    pos += {size}")
                for r, n in zip(run, names):
                    if r.type == "uuid":
                        lines.append(f"    {n} = _UUID(bytes={n})")
                    out.append((r.key, n))
                i += len(run)
                continue
            n = self.name("v")
            lines += self.dec_value(f, n, "    ")
            out.append((f.key, n))
            i += 1
        if self.flex:
            tnames = []
            for f in tagged:
                n = self.name("v")
                d = field_default(f, v)
                if d == [] and f.is_array:
                    lines.append(f"    {n} = []")
                elif isinstance(d, dict | list):
                    lines.append(f"    {n} = _copy({self.const(d)})")
                else:
                    lines.append(f"    {n} = {self.const(d)}")
                tnames.append(n)
                out.append((f.key, n))
            lines += [
                "    nt = buf[pos]",
                "    pos += 1",
                "    if nt:",
                "        if nt & 0x80:",
                "            nt, pos = _uvar_rest(buf, pos, nt)",
                "        if nt * 2 > blen - pos:",
                "            raise _Bad('tagged field count exceeds the remaining bytes')",
                "        for _ in range(nt):",
                "            tg = buf[pos]",
                "            pos += 1",
                "            if tg & 0x80:",
                "                tg, pos = _uvar_rest(buf, pos, tg)",
                "            sz = buf[pos]",
                "            pos += 1",
                "            if sz & 0x80:",
                "                sz, pos = _uvar_rest(buf, pos, sz)",
                "            te = pos + sz",
                "            if te > blen:",
                "                raise _Bad('tagged field size exceeds the remaining bytes')",
            ]
            kw = "if"
            for f, n in zip(tagged, tnames):
                vf = self.gen_value_decoder(f, elem=False)
                lines += [
                    f"            {kw} tg == {f.tag}:",
                    f"                {n}, p = {vf}(buf[:te], pos)",
                    "                if p != te:",
                    f"                    raise _Bad('tagged field {f.name}: size mismatch')",
                ]
                kw = "elif"
            lines.append("            pos = te")
        items = ", ".join(f"{k!r}: {n}" for k, n in out)
        lines.append(f"    return {{{items}}}, pos")
        self.funcs.append("\n".join(lines))
        return fn

    # ------------------------------------------------------------------------------------- encoding
    def write_len(self, ind: str, expr: str, compact: bool, width: str) -> list[str]:
        if compact:
            return [f"{ind}l = {expr} + 1", f"{ind}w.append(_UV1[l] if l < 128 else _uv(l))"]
        s = "_I16" if width == "h" else "_I32"
        return [f"{ind}w.append({s}.pack({expr}))"]

    def null_len(self, compact: bool, width: str) -> str:
        if compact:
            return "b'\\x00'"
        return "b'\\xff\\xff'" if width == "h" else "b'\\xff\\xff\\xff\\xff'"

    def enc_value(self, f: FieldSpec, x: str, ind: str, elem: bool = False) -> list[str]:
        """Lines encoding the value in local ``x`` of field ``f`` (its element if ``elem``) into ``w``."""
        v = self.v
        nullable = f.nullable(v) and not elem
        if f.is_array and not elem:
            return self.enc_array(f, x, ind)
        if f.is_struct:
            fn = self.gen_encoder(f.fields)
            if f.nullable(v) and not elem:
                return [
                    f"{ind}if {x} is None:",
                    f"{ind}    w.append(b'\\xff')",
                    f"{ind}else:",
                    f"{ind}    w.append(b'\\x01')",
                    f"{ind}    {fn}({x}, w)",
                ]
            return [f"{ind}{fn}({x}, w)"]
        t = f.type
        if t in FIXED_FORMATS:
            s = self.struct(">" + FIXED_FORMATS[t])
            arg = f"_ub({x})" if t == "uuid" else x
            return [f"{ind}w.append({s}.pack({arg}))"]
        compact = self.compact(f)
        if t == "records":
            helper = ("_rec_c" if compact else "_rec_p") + ("" if nullable else "n")
            prefix = "_uv(n + 1)" if compact else "_I32.pack(n)"
            return [
                f"{ind}if type({x}) is bytes and len({x}) < _ZCMIN:",
                f"{ind}    n = len({x})",
                f"{ind}    w.append({prefix})",
                f"{ind}    w.append({x})",
                f"{ind}else:",
                f"{ind}    {helper}({x}, w)",
            ]
        width = "h" if t == "string" else "i"
        lines = [f"{ind}if {x} is None:"]
        if nullable:
            lines.append(f"{ind}    w.append({self.null_len(compact, width)})")
        else:
            lines.append(f"{ind}    raise _EncErr('field {f.key} is not nullable in version {v}')")
        lines.append(f"{ind}else:")
        if t == "string":
            lines.append(f"{ind}    b = {x}.encode('utf-8')")
        else:
            lines.append(f"{ind}    b = {x}")
        lines += self.write_len(ind + "    ", "len(b)", compact, width)
        lines.append(f"{ind}    w.append(b)")
        return lines

    def enc_array(self, f: FieldSpec, x: str, ind: str) -> list[str]:
        compact = self.compact(f)
        lines = [f"{ind}if {x} is None:"]
        if f.nullable(self.v):
            lines.append(f"{ind}    w.append({self.null_len(compact, 'i')})")
        else:
            lines.append(f"{ind}    raise _EncErr('array {f.key} is not nullable in version {self.v}')")
        lines.append(f"{ind}else:")
        ind2 = ind + "    "
        lines += self.write_len(ind2, f"len({x})", compact, "i")
        if f.is_struct:
            fn = self.gen_encoder(f.fields)
            lines += [f"{ind2}for it in {x}:", f"{ind2}    {fn}(it, w)"]
        elif f.type in FIXED_FORMATS and f.type != "uuid":
            ch = FIXED_FORMATS[f.type]
            lines += [f"{ind2}if {x}:", f"{ind2}    w.append(_pack('>%d{ch}' % len({x}), *{x}))"]
        else:
            fn = self.gen_value_encoder(f)
            lines += [f"{ind2}for it in {x}:", f"{ind2}    {fn}(it, w)"]
        return lines

    def gen_value_encoder(self, f: FieldSpec, elem: bool = True) -> str:
        fn = self.name("_ev")
        body = self.enc_value(f, "x", "    ", elem=elem)
        self.funcs.append("\n".join([f"def {fn}(x, w):", *body]))
        return fn

    def gen_encoder(self, fields: list[FieldSpec]) -> str:
        fn = self.name("_e")
        v = self.v
        lines = [f"def {fn}(d, w):", "    g = d.get"]
        present = [f for f in fields if f.present(v)]
        regular = [f for f in present if not self.is_tagged(f)]
        tagged = sorted((f for f in present if self.is_tagged(f)), key=lambda f: f.tag or 0)
        # Kafka's rule: a field this version cannot carry must be ignorable or hold its default.
        for f in fields:
            if f.present(v) or f.ignorable:
                continue
            d = field_default(f, v)
            dc = self.const(d)
            if f.is_array and d == []:
                check = f"d[{f.key!r}] is not None and not d[{f.key!r}]"
            elif f.is_struct and isinstance(d, dict):
                check = f"_isdef(d[{f.key!r}], {dc})"
            else:
                check = f"d[{f.key!r}] == {dc}"
            lines += [
                f"    if {f.key!r} in d and not ({check}):",
                f"        _unsup({f.key!r}, {v})",
            ]
        i = 0
        last_fixed_line = -1
        last_fixed_fmt = ""
        last_fixed_args = ""
        while i < len(regular):
            f = regular[i]
            if _is_fixed(f):
                run = [f]
                while i + len(run) < len(regular) and _is_fixed(regular[i + len(run)]):
                    run.append(regular[i + len(run)])
                fmt = ">" + "".join(FIXED_FORMATS[r.type] for r in run)
                args = []
                for r in run:
                    a = f"g({r.key!r}, {self.const(field_default(r, v))})"
                    args.append(f"_ub({a})" if r.type == "uuid" else a)
                last_fixed_fmt, last_fixed_args = fmt, ", ".join(args)
                lines.append(f"    w.append({self.struct(fmt)}.pack({last_fixed_args}))")
                last_fixed_line = len(lines) - 1
                i += len(run)
                continue
            d = field_default(f, v)
            lines.append(f"    x = g({f.key!r}, {self.const(d)})")
            lines += self.enc_value(f, "x", "    ")
            i += 1
        if self.flex:
            if not tagged:
                if last_fixed_line == len(lines) - 1 and last_fixed_line >= 0:
                    # fold the empty tagged-field section into the last fixed run as a pad byte
                    lines[last_fixed_line] = f"    w.append({self.struct(last_fixed_fmt + 'x')}.pack({last_fixed_args}))"
                else:
                    lines.append("    w.append(b'\\x00')")
            else:
                lines.append("    tg = []")
                for f in tagged:
                    d = field_default(f, v)
                    dc = self.const(d)
                    lines.append(f"    x = g({f.key!r}, {dc})")
                    if f.is_array and d == []:
                        cond = "x is None or len(x) > 0"
                    elif f.is_struct and isinstance(d, dict):
                        cond = f"x is not {dc} and not _isdef(x, {dc})"
                    elif dc.startswith("_"):
                        cond = f"x is not {dc} and x != {dc}"
                    else:
                        cond = f"x != {dc}"
                    ev = self.gen_value_encoder(f, elem=False)
                    lines += [
                        f"    if {cond}:",
                        "        sub = []",
                        f"        {ev}(x, sub)",
                        "        data = b''.join(sub)",
                        f"        tg.append(_uv({f.tag}) + _uv(len(data)) + data)",
                    ]
                lines += [
                    "    if tg:",
                    "        w.append(_uv(len(tg)))",
                    "        w.extend(tg)",
                    "    else:",
                    "        w.append(b'\\x00')",
                ]
        if len(lines) == 2:
            lines.append("    pass")
        self.funcs.append("\n".join(lines))
        return fn


class CompiledMessage:
    """decode/encode for one (spec, version)."""

    __slots__ = ("decode", "encode", "flexible", "source", "spec", "version")

    def __init__(self, spec: MessageSpec, version: int, flexible: bool | None = None) -> None:
        self.spec = spec
        self.version = version
        self.flexible = spec.flexible(version) if flexible is None else flexible
        gen = _Gen(version, self.flexible)
        dname = gen.gen_decoder(spec.fields)
        ename = gen.gen_encoder(spec.fields)
        self.source = "\n\n".join(gen.funcs) + "\n"
        code = compile(self.source, f"<tidelog.protocol {spec.name} v{version}>", "exec")
        exec(code, gen.ns)
        self.decode: Callable[[memoryview, int], tuple[dict[str, Any], int]] = gen.ns[dname]
        self.encode: Callable[[Mapping[str, Any], list[Any]], None] = gen.ns[ename]
