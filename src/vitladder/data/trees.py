"""An image folder or a tar archive read as one tree of files, every read bounded. One walk lists both, so a folder
and the archive made from it list the same files: links lead to what they name (in an archive, to the member; a link
out of it is refused), and a link that cannot be followed stops the load with one line that names it and counts the
others. Only regular files are read, each refused unread over ``max_file_bytes``."""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import stat
import tarfile
import zlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from vitladder.errors import DataError
from vitladder.text import printable

Parts = tuple[str, ...]

MAX_ENTRIES = 1_000_000  # files, folders and links (CIFAR-10 has 60,022)
MAX_TOTAL_BYTES = 16 << 30  # bytes read in all: archive members, or a folder's images
MAX_LINK_HOPS = 40  # links followed to resolve one path, as Linux's ELOOP
MAX_DEPTH = 64  # folders in one path (an image tree is train/<class>/<image>); a lookup costs its depth squared
MAX_HEADER_BYTES = 1 << 20  # a member's headers (pax records, GNU long names, a sparse map) hold a path, not data
HEADER_BYTES_PER_MEMBER = 2048  # allowed on average beside the members' data: a header, a pax record, padding
MAX_TAIL_BYTES = 16 << 20  # after the end-of-archive blocks: record padding (GNU tar: 10 KiB)
# What a file (its stat.S_IFMT) or an archive member (its type) is
FILE_KINDS = {stat.S_IFDIR: "dir", stat.S_IFREG: "file", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
FILE_KINDS |= {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
MEMBER_KINDS = {tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink"}
MEMBER_KINDS |= {tarfile.FIFOTYPE: "a FIFO", tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device"}
# Decompressed here rather than by tarfile ('r|gz'): these readers raise EOFError on a truncated stream, where
# tarfile would quietly stop early.
DECOMPRESSORS = {b"\x1f\x8b": gzip.open, b"\xfd7zXZ\x00": lzma.open, b"BZh": bz2.open}


class Node(NamedTuple):  # what a path leads to, links followed
    kind: str  # "dir", "file", or what else it is: "a FIFO", "a character device", ...
    size: int
    key: Hashable  # the real file or folder, whichever path leads to it
    via_link: bool
    stamp: str = ""  # a folder's files: size and mtime, for the cache's fingerprint


Listing = tuple[set[Parts], dict[Parts, Node | DataError]]  # what walk finds


class Unreadable(Exception):
    """A link that cannot be followed; ``str()`` says why, e.g. "is a symlink loop"."""


def show(parts: Parts) -> str:
    return printable("/".join(parts), limit=300)


def too_big(source: Path, name: str, size: int, max_file_bytes: int) -> DataError:
    return DataError(
        f"{source}: {name} is {size / 2**20:.1f} MiB, over the {max_file_bytes / 2**20:g} MiB limit for one "
        "file (refused unread): remove it, or raise data.max_file_mib if it really is one image"
    )


def too_much(problem: str) -> DataError:
    return DataError(f"{problem} for one data set of small images; split it")


def not_a_file(source: Path, parts: Parts, what: str) -> DataError:
    return DataError(f"{source}: {show(parts)} is not a regular file ({what}): remove it")


def walk(tree: FolderTree | ArchiveTree, wanted: Callable[[Parts], bool]) -> Listing:
    """(every folder, {each path ``wanted`` accepts: its Node, or the DataError that stands for it}), hidden names
    left out. A link that cannot be followed, or a folder link back to a folder above it, is a DataError at once; a
    wanted path that is no regular file or is too big is kept as its DataError: it matters only in the layout."""
    source, max_file_bytes, dirs, files, broken = tree.source, tree.max_file_bytes, set(), {}, []
    count = total = 0
    stack = [((), (tree.lookup(()).key,))]
    while stack:
        here, ancestors = stack.pop()
        for name in tree.children(here):
            if name.startswith("."):  # .DS_Store, macOS "._x.jpg" twins, .git: never part of the layout
                continue
            parts, count = (*here, name), count + 1
            if count > MAX_ENTRIES:
                raise too_much(f"{source} holds more than {MAX_ENTRIES:,} files and folders: too many")
            try:
                node = tree.lookup(parts)
            except Unreadable as why:
                broken.append((parts, str(why)))
                continue
            if node.kind == "dir":
                if len(parts) >= MAX_DEPTH:
                    deep = f"is {MAX_DEPTH} folders deep, too deep for an image tree (train/<class>/<image>)"
                    raise DataError(f"{source}: {show(parts)} {deep}: remove it")
                if node.key in ancestors:
                    loop = "is a symlink loop (it leads back to a folder that holds it): remove it"
                    raise DataError(f"{source}: {show(parts)} {loop}")
                dirs.add(parts)
                stack.append((parts, (*ancestors, node.key)))
            elif not wanted(parts):
                continue
            elif node.kind != "file":
                files[parts] = not_a_file(source, parts, f"a link to {node.kind}" if node.via_link else node.kind)
            elif node.size > max_file_bytes:
                files[parts] = too_big(source, show(parts), node.size, max_file_bytes)
            elif (total := total + node.size) > MAX_TOTAL_BYTES:
                raise too_much(f"{source}: more than {MAX_TOTAL_BYTES / 2**30:g} GiB of images to read: too much")
            else:
                files[parts] = node
    if broken:
        (parts, why), n = min(broken), len(broken)
        it = "it" if n == 1 else "them"
        raise DataError(
            f"{source}: {show(parts)} {why} ({n} link{'s' * (n > 1)} in all cannot be followed): "
            f"point {it} at files inside the {tree.kind} or remove {it}"
        )
    return dirs, files


def _os_error(verb: str, path: Path, error: OSError) -> DataError:
    return DataError(f"could not {verb} {printable(path)} ({error.strerror or error}): check its permissions")


@dataclass
class FolderTree:
    source: Path
    max_file_bytes: int
    kind = "folder"

    def children(self, parts: Parts) -> list[str]:
        try:
            return sorted(os.listdir(self.source.joinpath(*parts)))
        except OSError as error:
            raise _os_error("list", self.source.joinpath(*parts), error) from error

    def lookup(self, parts: Parts) -> Node:
        path = self.source.joinpath(*parts)
        try:
            st = os.stat(path)  # follows links, as reading will
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise Unreadable("is a symlink loop") from error
            if os.path.islink(path):
                raise Unreadable(f"is a dangling symlink (to {printable(os.readlink(path), 200)})") from error
            raise _os_error("read", path, error) from error
        kind = FILE_KINDS.get(stat.S_IFMT(st.st_mode), "not a file")
        return Node(kind, st.st_size, (st.st_dev, st.st_ino), os.path.islink(path), f"{st.st_size}:{st.st_mtime_ns}")

    def read(self, parts: Parts) -> bytes:
        """The bytes of a regular file, checked again on the open file: it may have changed since the walk."""
        path = self.source.joinpath(*parts)
        try:  # non-blocking: a FIFO swapped in after the walk must not hang the open
            with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
                if (kind := FILE_KINDS.get(stat.S_IFMT(os.fstat(f.fileno()).st_mode), "not a file")) != "file":
                    raise not_a_file(self.source, parts, kind)
                data = f.read(self.max_file_bytes + 1)
        except OSError as error:
            raise _os_error("read", path, error) from error
        if len(data) > self.max_file_bytes:
            raise too_big(self.source, show(parts), os.stat(path).st_size, self.max_file_bytes)
        return data


class Budget:
    """An archive's decompressed stream, refused past ``limit`` bytes in all (headers are work too, and the members'
    own bound leaves them out) or past MAX_HEADER_BYTES before a member's data: tarfile reads an extended header, a
    long name or a sparse map whole."""

    def __init__(self, stream: object, source: Path) -> None:
        self.stream, self.source, self.count = stream, source, 0
        self.limit = MAX_TOTAL_BYTES + HEADER_BYTES_PER_MEMBER * MAX_ENTRIES
        self.headers_end = MAX_HEADER_BYTES + tarfile.RECORDSIZE  # tarfile reads ahead a record at a time

    def read(self, size: int = -1) -> bytes:
        room = min(self.limit, self.headers_end) - self.count + 1
        data = self.stream.read(room if size < 0 else min(size, room))
        self.count += len(data)
        if self.count > self.headers_end:
            raise tarfile.ReadError(f"over {MAX_HEADER_BYTES >> 20} MiB of headers before a member's data")
        if self.count > self.limit:
            raise too_much(f"{self.source}: more than {self.limit / 2**30:.1f} GiB once decompressed: too much")
        return data


def relative_parts(name: str) -> Parts:
    # "./train/cat/1.jpg" and "/train/cat/1.jpg" both become ("train", "cat", "1.jpg").
    return tuple(p for p in PurePosixPath(name).parts if p not in ("/", "."))


class Entry(NamedTuple):  # an archive's member
    kind: str  # "dir", "file", "symlink", "hardlink", or what else it is
    size: int = 0
    target: str = ""  # a symlink's target (from its folder), a hard link's member name (from the top)


DIR = Entry("dir")


class ArchiveTree:
    """A tar archive's members as a tree whose links are followed as a file system's are. The archive is read as a
    stream, in one pass (so decompressed once), each member refused at its header when over the limits; every regular
    member is kept, as a link may lead to any of them."""

    kind = "archive"

    def __init__(self, source: Path, max_file_bytes: int) -> None:
        self.source, self.max_file_bytes, self.entries, self.data = source, max_file_bytes, {}, {}
        try:
            self._read()
        except (tarfile.TarError, lzma.LZMAError, zlib.error, EOFError, OSError, ValueError) as error:
            detail = f"{type(error).__name__}: {error}"[:80]
            raise DataError(f"{source} is truncated or corrupted ({detail}): copy or download it again") from error
        self.index: dict[Parts, list[str]] = {}
        for parts in sorted(self.entries):
            self.index.setdefault(parts[:-1], []).append(parts[-1])

    def _read(self) -> None:
        source, max_file_bytes, count, total = self.source, self.max_file_bytes, 0, 0
        with open(source, "rb") as raw:
            unpack = next((unpack for start, unpack in DECOMPRESSORS.items() if raw.peek(6).startswith(start)), None)
            stream = Budget(unpack(raw) if unpack else raw, source)
            with stream.stream, tarfile.open(fileobj=stream, mode="r|") as archive:  # 'r|': a stream, read once
                while (member := archive.next()) is not None:
                    archive.members.clear()  # a stream never looks back; a million headers would cost ~0.5 GB
                    stream.headers_end = stream.count + member.size + MAX_HEADER_BYTES + tarfile.RECORDSIZE
                    if member.issparse():
                        name = printable(member.name, 60)
                        raise tarfile.ReadError(f"{name} is a sparse file, which an image never is")
                    count, total = count + 1, total + member.size
                    if count > MAX_ENTRIES:
                        raise too_much(f"{source} holds more than {MAX_ENTRIES:,} members: too many")
                    if member.size > max_file_bytes:  # before tarfile reads a byte of its data
                        raise too_big(source, f"member {printable(member.name, 300)}", member.size, max_file_bytes)
                    if total > MAX_TOTAL_BYTES:
                        raise too_much(f"{source}: more than {MAX_TOTAL_BYTES / 2**30:g} GiB of members: too much")
                    parts = relative_parts(member.name)
                    for i in range(1, len(parts)):  # archives may omit folder members
                        self.entries.setdefault(parts[:i], DIR)
                    kind = "file" if member.isreg() else MEMBER_KINDS.get(member.type, "a member of an unknown type")
                    if parts:
                        self.entries[parts] = Entry(kind, member.size, member.linkname)
                    if parts and kind == "file":
                        self.data[parts] = archive.extractfile(member).read()
                # Read on to the end: a compressed stream checks its end marker and checksum only there, and a tar
                # cut at a member boundary shows only as a missing end-of-archive block.
                stream.headers_end = stream.limit
                if len(stream.read(MAX_TAIL_BYTES + 1)) > MAX_TAIL_BYTES:
                    raise tarfile.ReadError(f"over {MAX_TAIL_BYTES >> 20} MiB after the end-of-archive blocks")
                if stream.count < archive.offset + tarfile.BLOCKSIZE:
                    raise tarfile.ReadError("no end-of-archive block")

    def children(self, parts: Parts) -> list[str]:
        return self.index.get(self.resolve(parts)[0], [])

    def lookup(self, parts: Parts) -> Node:
        real, hops = self.resolve(parts)
        entry = self.entries.get(real, DIR)  # () is the root
        return Node(entry.kind, entry.size, real, via_link=hops > 0)

    def read(self, parts: Parts) -> bytes:
        return self.data[self.resolve(parts)[0]]

    def resolve(self, parts: Parts, hops: int = 0) -> tuple[Parts, int]:
        """(the member ``parts`` leads to, links followed), as a file system resolves a path."""
        real: Parts = ()
        for name in parts:
            if name == "..":
                if not real:
                    raise Unreadable("leads outside the archive")
                real = real[:-1]
                continue
            here = (*real, name)
            if (entry := self.entries.get(here)) is None:
                raise Unreadable("is not in the archive")
            if entry.kind in ("symlink", "hardlink"):
                if (hops := hops + 1) > MAX_LINK_HOPS:
                    raise Unreadable("is a symlink loop")
                target = printable(entry.target, 200)
                if entry.kind == "symlink" and entry.target.startswith("/"):
                    raise Unreadable(f"is a link to {target}, outside the archive")
                base = real if entry.kind == "symlink" else ()  # a hard link names a member from the top
                try:
                    here, hops = self.resolve(base + relative_parts(entry.target), hops)
                except Unreadable as why:
                    if str(why) == "is a symlink loop":
                        raise
                    raise Unreadable(f"is a link to {target}, which {why}") from None
            real = here
        return real, hops
