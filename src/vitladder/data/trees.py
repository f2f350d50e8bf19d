"""An image folder or a tar archive read as one tree of files, with every read bounded.

Both go through the same walk (:func:`walk`), so a folder and the archive made from it list the same
files: symlinks and hard links lead to the file they point at (in an archive, to the member they
name; a link out of the archive is refused), and a link that cannot be followed stops the load with
one line that names it and counts the others. Only regular files are read, each refused before it
is read when over ``Limits.max_file_bytes`` (a file's stat size, an archive member's header size).
"""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import stat
import tarfile
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from vitladder.errors import DataError
from vitladder.text import printable

Parts = tuple[str, ...]

MAX_ENTRIES = 1_000_000  # files, folders and links (CIFAR-10 has 60,022)
MAX_TOTAL_BYTES = 16 << 30  # bytes read in all: archive members, or a folder's images
MAX_LINK_HOPS = 40  # links followed to resolve one path, as Linux's ELOOP
MAX_HEADER_BYTES = 1 << 20  # a member's headers (pax records, GNU long names) hold a path, not data
HEADER_BYTES_PER_MEMBER = 2048  # allowed on average beside the members' data: a header, a pax record, padding
MAX_TAIL_BYTES = 16 << 20  # after the end-of-archive blocks: record padding (GNU tar: 10 KiB)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in after the stat must not block the open


@dataclass(frozen=True)
class Limits:
    max_file_bytes: int
    max_entries: int = MAX_ENTRIES
    max_total_bytes: int = MAX_TOTAL_BYTES


@dataclass(frozen=True)
class Node:
    """What a path leads to, links followed."""

    kind: str  # "dir", "file", or what else it is: "a FIFO", "a character device", ...
    size: int
    key: Hashable  # one per real file or folder, whichever path leads to it
    via_link: bool = False
    stamp: str = ""  # folders: size and mtime, for the cache's fingerprint


class Unreadable(Exception):
    """A path that cannot be followed; ``str()`` says why, e.g. "is a symlink loop"."""


class Tree(Protocol):
    kind: str  # "folder" or "archive"

    def children(self, parts: Parts) -> list[str]: ...

    def lookup(self, parts: Parts) -> Node: ...  # raises Unreadable


def show(parts: Parts) -> str:
    return printable("/".join(parts), limit=300)


def too_big(source: Path, name: str, size: int, limits: Limits) -> DataError:
    return DataError(
        f"{source}: {name} is {size / 2**20:.1f} MiB, over the {limits.max_file_bytes / 2**20:g} MiB limit for one "
        "file (refused unread): remove it, or raise data.max_file_mib if it really is one image"
    )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "dir"),
        (stat.S_ISREG, "file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


@dataclass
class Listing:
    dirs: set[Parts] = field(default_factory=set)  # every folder, links followed, hidden ones left out
    files: dict[Parts, Node | DataError] = field(default_factory=dict)  # the wanted files, or why not


def walk(tree: Tree, source: Path, limits: Limits, wanted: Callable[[Parts], bool]) -> Listing:
    """Every non-hidden path of ``tree``, links followed; ``files`` holds the paths ``wanted`` accepts.

    A link that cannot be followed (dangling, a loop, out of the archive) or a folder link that leads
    back to a folder above it is a DataError at once; a wanted path that is no regular file or too big
    is kept as its DataError, which matters only if the path turns out to be in the layout.
    """
    listing, broken = Listing(), []
    count = total = 0
    stack: list[tuple[Parts, tuple[Hashable, ...]]] = [((), (tree.lookup(()).key,))]
    while stack:
        here, ancestors = stack.pop()
        for name in tree.children(here):
            if name.startswith("."):  # .DS_Store, macOS "._x.jpg" twins, .git: never part of the layout
                continue
            parts = here + (name,)
            count += 1
            if count > limits.max_entries:
                raise DataError(
                    f"{source} holds more than {limits.max_entries:,} files and folders: "
                    "too many for one data set of small images; split it"
                )
            try:
                node = tree.lookup(parts)
            except Unreadable as why:
                broken.append((parts, str(why)))
                continue
            if node.kind == "dir":
                if node.key in ancestors:
                    raise DataError(
                        f"{source}: {show(parts)} is a symlink loop (it leads back to a folder "
                        "that holds it): remove it"
                    )
                listing.dirs.add(parts)
                stack.append((parts, ancestors + (node.key,)))
            elif wanted(parts):
                if node.kind != "file":
                    what = f"a link to {node.kind}" if node.via_link else node.kind
                    listing.files[parts] = DataError(
                        f"{source}: {show(parts)} is not a regular file ({what}): remove it"
                    )
                    continue
                if node.size > limits.max_file_bytes:
                    listing.files[parts] = too_big(source, show(parts), node.size, limits)
                    continue
                total += node.size
                if total > limits.max_total_bytes:
                    raise DataError(
                        f"{source}: more than {limits.max_total_bytes / 2**30:g} GiB of images to read: "
                        "too much for one data set of small images; split it"
                    )
                listing.files[parts] = node
    if broken:
        parts, why = min(broken)
        n = len(broken)
        raise DataError(
            f"{source}: {show(parts)} {why} ({n} link{'s' * (n > 1)} in all cannot be followed): "
            f"point {'it' if n == 1 else 'them'} at files inside the {tree.kind} or remove "
            f"{'it' if n == 1 else 'them'}"
        )
    return listing


# ---------------------------------------------------------------------------------------------
# A folder


class FolderTree:
    kind = "folder"

    def __init__(self, root: Path) -> None:
        self.root = root

    def children(self, parts: Parts) -> list[str]:
        path = self.root.joinpath(*parts)
        try:
            return sorted(os.listdir(path))
        except OSError as error:
            raise DataError(
                f"could not list {printable(path)} ({error.strerror or error}): check its permissions"
            ) from error

    def lookup(self, parts: Parts) -> Node:
        path = self.root.joinpath(*parts)
        try:
            st = os.stat(path)  # follows links, as reading will
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise Unreadable("is a symlink loop") from error
            if os.path.islink(path):
                raise Unreadable(f"is a dangling symlink (to {printable(os.readlink(path), 200)})") from error
            raise DataError(
                f"could not read {printable(path)} ({error.strerror or error}): check its permissions"
            ) from error
        return Node(
            _kind(st.st_mode),
            st.st_size,
            (st.st_dev, st.st_ino),
            os.path.islink(path),
            f"{st.st_size}:{st.st_mtime_ns}",
        )

    def read(self, parts: Parts, source: Path, limits: Limits) -> bytes:
        """The bytes of a regular file, re-checked on the open file: it may have changed since the walk."""
        path = self.root.joinpath(*parts)
        try:
            with open(os.open(path, os.O_RDONLY | _NONBLOCK), "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise DataError(f"{source}: {show(parts)} is not a regular file ({_kind(st.st_mode)}): remove it")
                data = f.read(limits.max_file_bytes + 1)
        except OSError as error:
            raise DataError(
                f"could not read {printable(path)} ({error.strerror or error}): check its permissions"
            ) from error
        if len(data) > limits.max_file_bytes:
            raise too_big(source, show(parts), os.stat(path).st_size, limits)
        return data


def read_folder(
    tree: FolderTree,
    listing: Listing,
    source: Path,
    limits: Limits,
    decode: Callable[[bytes, Parts], object],
    advance: Callable[[int], None],
) -> dict[Parts, object]:
    """{wanted path: decode(its bytes), or the DataError that stands for it}; a file is read once."""
    decoded: dict[Hashable, object] = {}
    images: dict[Parts, object] = {}
    for i, (parts, node) in enumerate(sorted(listing.files.items())):
        if isinstance(node, Node) and node.key not in decoded:
            try:
                decoded[node.key] = decode(tree.read(parts, source, limits), parts)
            except DataError as error:
                decoded[node.key] = error
        images[parts] = decoded[node.key] if isinstance(node, Node) else node
        advance(i + 1)
    return images


# ---------------------------------------------------------------------------------------------
# A tar archive, read as a stream (decompressed once); a second pass only for links to members
# that were not decoded on the first

# Compression by magic bytes. We decompress ourselves rather than let tarfile do it ('r|gz'),
# because these readers raise EOFError on a truncated stream where tarfile would quietly stop early.
_DECOMPRESSORS: dict[bytes, Callable[[BinaryIO], BinaryIO]] = {
    b"\x1f\x8b": lambda f: gzip.open(f),
    b"\xfd7zXZ\x00": lambda f: lzma.open(f),
    b"BZh": lambda f: bz2.open(f),
}


class _Budget:
    """The decompressed stream, refused once more than ``limit`` bytes have come through it (headers, a pax
    record per member say, are work too, and the members' own bound leaves them out), or more than
    MAX_HEADER_BYTES before a member's data: tarfile reads an extended header, or a sparse file's map, whole."""

    def __init__(self, stream: BinaryIO, limit: int, source: Path) -> None:
        self.stream, self.limit, self.source, self.count = stream, limit, source, 0
        self.headers_end = MAX_HEADER_BYTES + tarfile.RECORDSIZE  # tarfile reads ahead a record at a time

    def read(self, size: int = -1) -> bytes:
        room = min(self.limit, self.headers_end) - self.count + 1
        data = self.stream.read(room if size < 0 else min(size, room))
        self.count += len(data)
        if self.count > self.headers_end:
            raise tarfile.ReadError(f"over {MAX_HEADER_BYTES >> 20} MiB of headers before a member's data")
        if self.count > self.limit:
            raise DataError(
                f"{self.source}: more than {self.limit / 2**30:.1f} GiB once decompressed: "
                "too much for one data set of small images; split it"
            )
        return data

    def tell(self) -> int:
        return self.count


def relative_parts(name: str) -> Parts:
    # "./train/cat/1.jpg" and "/train/cat/1.jpg" both become ("train", "cat", "1.jpg").
    return tuple(p for p in PurePosixPath(name).parts if p not in ("/", "."))


Member = tuple[Parts, tarfile.TarInfo, Callable[[], bytes]]


def stream_members(source: Path, limits: Limits, advance: Callable[[int], None]) -> Iterator[Member]:
    """(parts, header, read) per member, each refused at its header when over the limits."""
    with open(source, "rb") as raw:
        head = raw.read(6)
        raw.seek(0)
        opener = next((open_ for magic, open_ in _DECOMPRESSORS.items() if head.startswith(magic)), None)
        decompressed = opener(raw) if opener else raw
        stream = _Budget(decompressed, limits.max_total_bytes + HEADER_BYTES_PER_MEMBER * limits.max_entries, source)
        # Stream mode ('r|') reads the archive in one pass, without seeking, so it is decompressed once.
        with decompressed, tarfile.open(fileobj=stream, mode="r|") as archive:
            count = total = 0
            while (member := archive.next()) is not None:
                archive.members.clear()  # a stream never looks back; a million headers would cost ~0.5 GB
                stream.headers_end = stream.count + member.size + MAX_HEADER_BYTES + tarfile.RECORDSIZE
                if member.issparse():
                    raise tarfile.ReadError(f"{printable(member.name, 60)} is a sparse file, which an image never is")
                count += 1
                if count > limits.max_entries:
                    raise DataError(
                        f"{source} holds more than {limits.max_entries:,} members: "
                        "too many for one data set of small images; split it"
                    )
                if member.size > limits.max_file_bytes:  # before tarfile reads a byte of its data
                    raise too_big(source, f"member {printable(member.name, 300)}", member.size, limits)
                total += member.size
                if total > limits.max_total_bytes:
                    raise DataError(
                        f"{source}: more than {limits.max_total_bytes / 2**30:g} GiB of members: "
                        "too much for one data set of small images; split it"
                    )
                yield relative_parts(member.name), member, lambda m=member: archive.extractfile(m).read(m.size)
                advance(raw.tell())  # compressed bytes consumed: the progress bar's unit
            # Read on to the end: a compressed stream checks its end marker and checksum only there,
            # and a tar cut at a member boundary shows only as a missing end-of-archive block.
            tail, stream.headers_end = 0, stream.limit
            while chunk := stream.read(1 << 20):
                tail += len(chunk)
                if tail > MAX_TAIL_BYTES:
                    raise tarfile.ReadError(f"over {MAX_TAIL_BYTES >> 20} MiB after the end-of-archive blocks")
            if stream.tell() < archive.offset + tarfile.BLOCKSIZE:
                raise tarfile.ReadError("no end-of-archive block")


@dataclass(frozen=True)
class _Entry:
    kind: str  # "dir", "file", "symlink", "hardlink", or what else it is
    size: int = 0
    target: str = ""  # a symlink's target (relative to its folder), a hard link's member name


_DIR = _Entry("dir")


def _entry(member: tarfile.TarInfo) -> _Entry:
    if member.isreg():
        return _Entry("file", member.size)
    if member.isdir():
        return _DIR
    if member.issym():
        return _Entry("symlink", target=member.linkname)
    if member.islnk():
        return _Entry("hardlink", target=member.linkname)
    what = {tarfile.FIFOTYPE: "a FIFO", tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device"}
    return _Entry(what.get(member.type, "a member of an unknown type"))


class ArchiveTree:
    """The members of an archive as a tree whose links are followed like a file system's."""

    kind = "archive"

    def __init__(self, entries: dict[Parts, _Entry]) -> None:
        self.entries = entries
        self.index: dict[Parts, list[str]] = {}
        for parts in entries:
            self.index.setdefault(parts[:-1], []).append(parts[-1])
        for names in self.index.values():
            names.sort()

    def children(self, parts: Parts) -> list[str]:
        return self.index.get(self._resolve(parts)[0], [])

    def lookup(self, parts: Parts) -> Node:
        real, hops = self._resolve(parts)
        entry = self.entries.get(real, _DIR)  # () is the root
        return Node(entry.kind, entry.size, real, via_link=bool(hops))

    def _resolve(self, parts: Parts, hops: int = 0) -> tuple[Parts, int]:
        """(the member ``parts`` leads to, links followed), as a file system resolves a path."""
        real: Parts = ()
        for name in parts:
            if name == "..":
                if not real:
                    raise Unreadable("leads outside the archive")
                real = real[:-1]
                continue
            here = real + (name,)
            entry = self.entries.get(here)
            if entry is None:
                raise Unreadable("is not in the archive")
            if entry.kind in ("symlink", "hardlink"):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise Unreadable("is a symlink loop")
                target = printable(entry.target, 200)
                if entry.kind == "symlink" and entry.target.startswith("/"):
                    raise Unreadable(f"is a link to {target}, outside the archive")
                base = real if entry.kind == "symlink" else ()  # a hard link names a member from the top
                try:
                    here, hops = self._resolve(base + relative_parts(entry.target), hops)
                except Unreadable as why:
                    if str(why) == "is a symlink loop":
                        raise
                    raise Unreadable(f"is a link to {target}, which {why}") from None
            real = here
        return real, hops


def read_archive(
    source: Path,
    limits: Limits,
    wanted: Callable[[Parts], bool],
    decode: Callable[[bytes, Parts], object],
    advance: Callable[[int], None],
) -> tuple[set[Parts], dict[Parts, object]]:
    """(folders, {wanted path: decode(its bytes) or the DataError that stands for it}) of a tar archive."""
    entries: dict[Parts, _Entry] = {}
    decoded: dict[Parts, object] = {}
    for parts, member, read in stream_members(source, limits, advance):
        if not parts:
            continue
        for i in range(1, len(parts)):  # archives may omit folder members
            entries.setdefault(parts[:i], _DIR)
        entries[parts] = _entry(member)
        if member.isreg() and wanted(parts):
            decoded[parts] = decode(read(), parts)
    listing = walk(ArchiveTree(entries), source, limits, wanted)
    # A wanted path that links to a member outside the layout (so not decoded): read the stream again.
    missing = {node.key for node in listing.files.values() if isinstance(node, Node) and node.key not in decoded}
    if missing:
        for parts, member, read in stream_members(source, limits, lambda _: None):
            if parts in missing and member.isreg():
                decoded[parts] = decode(read(), parts)
    images = {parts: decoded[node.key] if isinstance(node, Node) else node for parts, node in listing.files.items()}
    return listing.dirs, images
