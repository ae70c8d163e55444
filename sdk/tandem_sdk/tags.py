"""Privacy tags as people type them: read one way on the device and in the gateway, and checked for typos.

A tag is read by `normalize_tag` (composed, invisible characters dropped, full-width letters and Unicode spaces
made ASCII, lower-cased, stripped); a string may hold several, separated by ASCII, full-width or ideographic commas.
A request carries at most `MAX_TAGS` tags of at most `MAX_TAG_CHARS` characters each: anything longer is not a
tag, and reading it should not cost more than the request.

A typo in a never-leave tag is the failure that matters: `privat` read as just another tag would let the
request leave as if untagged. `resembles` says which tag a typo was meant as; the SDK refuses such a tag before
sending (`check_spelling`), and the gateway names the tag meant in its 400 and refuses policies that would
accept one.
"""

import re
import unicodedata
from collections.abc import Iterable, Mapping

from tandem_sdk.errors import TandemError
from tandem_sdk.normalize import LATIN_LOOKALIKES, normalize

TAG_SEPARATORS = re.compile("[,\uff0c\u3001]")  # a comma, a full-width comma, an ideographic comma
MAX_TAGS = 32
MAX_TAG_CHARS = 64


class TagError(TandemError, ValueError):
    """Privacy tags that are not a string or a list of strings, too many or too long, or one that reads like a
    misspelled never-leave tag. Nothing was sent anywhere."""


def privacy_tags(*values: object) -> frozenset[str]:
    """Tags from any of: None, "pii", "Private, PII", ["PII", "internal"], "ｐｒｉｖａｔｅ、pii"."""
    tags: set[str] = set()
    for value in values:
        if value is None:
            continue
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in items):
            raise TagError(  # its type, not its value: a dict of the app's may hold what is private (a review)
                f'privacy tags must be a string or a list of strings, e.g. "pii"; got a {type(value).__name__}'
            )
        if len(items) > MAX_TAGS or sum(map(len, items)) > MAX_TAGS * (MAX_TAG_CHARS + 1):
            raise TagError(f"at most {MAX_TAGS} privacy tags of at most {MAX_TAG_CHARS} characters each")
        for part in (part for item in items for part in TAG_SEPARATORS.split(item)):
            if len(part) > MAX_TAG_CHARS:  # (not repeated: a sentence passed as a tag may be the private text)
                raise TagError(f"a privacy tag of {len(part)} characters is over {MAX_TAG_CHARS} characters")
            if any(c in part for c in "\r\n\x00"):  # (it goes in a header: the error was the gateway's, unreached)
                raise TagError("a privacy tag holds a line break or NUL; nothing was sent anywhere")
            tags.add(normalize_tag(part))
    tags.discard("")
    if len(tags) > MAX_TAGS:
        raise TagError(f"at most {MAX_TAGS} privacy tags of at most {MAX_TAG_CHARS} characters each")
    return frozenset(tags)


def normalize_tag(tag: str) -> str:
    """One tag in the form policies and never-leave sets compare: composed (NFC: an accent typed as a separate
    mark, as macOS file names and some keyboards give it, reads as the accented letter), then tandem_sdk.normalize,
    lower-cased, stripped; and again until it reads the same, so the tag the SDK sends reads as the SDK read it:
    `Pİİ` (a Turkish locale's upper-cased `pii`) lower-cases to `pi̇i̇`, which the gateway, reading it once more,
    took for `pii`, a never-leave tag the SDK had not seen (a review; marks beside variation selectors did as much)."""
    for _ in range(8):
        read = normalize(unicodedata.normalize("NFC", tag) if not tag.isascii() else tag).lower().strip()
        if read == tag:
            break
        tag = read
    return tag


# Letters a tag may be typed in that read as Latin ones: Cyrillic and Greek lookalikes (tandem_sdk.normalize's),
# the dotless ı, small capitals (`ᴘɪɪ`).
_SMALL_CAPITALS = "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢ"
_AS_LATIN = str.maketrans(
    LATIN_LOOKALIKES | {"ı": "i"} | dict(zip(_SMALL_CAPITALS, "abcdefghijklmnoprstuvwyz", strict=True))
)


def _skeleton(tag: str) -> str:
    """A tag's letters and digits alone, lookalikes read as Latin: `p.i.i.`, `P I I`, `PІІ` (Cyrillic) read `pii`."""
    return re.sub(r"[^a-z0-9]", "", tag.translate(_AS_LATIN).lower())


def resembles(tag: str, tags: Iterable[str]) -> str | None:
    """The tag of `tags` that `tag` reads like a typo or a variant of, or None: one edit away from a tag of up to
    four letters, two from a longer one (`privat`, `pil`, `phi`, `confidental`); its start (`priv`, `conf`); the
    tag as a word in it (`private-ok`, `#pii`, `pii2`), or a longer tag as its start (`confidentiality`); or the
    same letters parted or in lookalikes (`p.i.i.`, `P I I`, `PІІ`, `ᴘɪɪ`: a review found them sent on)."""
    skeleton = _skeleton(tag)
    for known in sorted(tags):
        if tag == known:
            continue
        if (
            _edits(tag, known) <= (1 if len(known) <= 4 else 2)
            or (len(tag) >= 4 and known.startswith(tag))
            or (len(known) >= 5 and tag.startswith(known))
            or re.search(rf"(?<![a-z]){re.escape(known)}(?![a-z])", tag)
            or (skeleton and _edits(skeleton, known) <= (1 if len(known) <= 4 else 2))
        ):
            return known
    return None


def check_spelling(tags: Iterable[str], never_leave: Iterable[str], known: Iterable[str] = ()) -> None:
    """Refuse, before anything is sent, a tag that reads like a never-leave tag without being one: sent on, it
    would not keep the request on the device. `known` are the app's own tags that only look like one."""
    never = set(never_leave)
    for tag in sorted(set(tags) - never - set(known)):
        if tag in _YES:  # metadata values are strings: {"privacy": "true"} meant private
            raise TagError(
                f"privacy tag {tag!r} says yes, not which tag; the request was not sent anywhere. Tag it with one of "
                f"{sorted(never)} (e.g. privacy='private')"
            )
        meant = resembles(tag, never)
        if meant is not None:
            raise TagError(
                f"privacy tag {tag!r} is not a never-leave tag but reads like {meant!r}; the request was not sent "
                f"anywhere. Correct the tag, or pass known_tags=[{tag!r}] if it is a tag of its own"
            )


# A key made of a never-leave tag, or of words that keep a request local, and only these words besides, is a flag
# for it: `is_private`, `containsPii`, `pii_data`, `local_only`, `onDevice`, `sensitive`; not `private_key_id`,
# `case_sensitive`, `run_on_device`, `pii_level`. A flag set to false (`{"is_private": false}`) says what no tag says.
_FLAG_WORDS = frozenset("is has contains with data content request flag info only marked tagged".split())
_KEEP_LOCAL = frozenset({"sensitive", "localonly", "ondevice", "nocloud", "edgeonly"})
_KEY_WORD = re.compile(r"[-_ .:/]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_YES = frozenset({"true", "yes", "y", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off", "none", "n", ""})
_CONSENT_WORDS = ("policy", "consent", "notice")  # privacy_policy_version, privacyConsent: the app's own


def _flag_for(key: str, never_leave: set[str]) -> bool:
    """`key` names a never-leave tag, or keeping the request local, as a flag (see _FLAG_WORDS)."""
    words = [w for w in _KEY_WORD.split(normalize_tag(_CAMEL.sub("_", key[: MAX_TAG_CHARS + 1]))) if w]
    meant = [w for w in words if w not in _FLAG_WORDS]
    joined = "".join(w for w in words if w not in ("is", "has", "contains", "with"))  # local_only, on_device
    return (len(meant) == 1 and meant[0] in never_leave | _KEEP_LOCAL) or joined in _KEEP_LOCAL


def _said_false(value: object) -> bool:
    return value is False or value is None or value == 0 or (isinstance(value, str) and value.strip().lower() in _FALSE)


def misplaced_privacy_key(metadata: Mapping, tags: Iterable[str], never_leave: Iterable[str]) -> str | None:
    """A key of `metadata` other than `privacy` that the caller meant for privacy tags (`Privacy`, `privcy`,
    `privacy_tags`, a tag as a key: `{"pii": "yes"}`, a flag for a never-leave tag or for keeping the request local,
    set: `{"is_private": true}`, `{"local_only": "yes"}` (_FLAG_WORDS); or a never-leave tag as the value:
    `{"label": "private"}`), or None. Read as any other metadata, it would leave the request untagged."""
    tags, never_leave = set(tags), set(never_leave)
    for key, value in metadata.items():
        if key == "privacy" or not isinstance(key, str):
            continue
        name = normalize_tag(key[: MAX_TAG_CHARS + 1])
        if (name.startswith("privacy") and not any(w in name for w in _CONSENT_WORDS)) or _edits(name, "privacy") <= 1:
            return key  # privacy_tags, privcy; not privacy_policy_version
        if (name in tags or _flag_for(key, never_leave)) and not _said_false(value):
            return key  # {"pii": "yes"}, {"is_private": true}; set to false, it says what no tag says
        values = [value] if isinstance(value, str) else value if isinstance(value, list | tuple) else []
        if any(isinstance(v, str) and len(v) <= MAX_TAG_CHARS and normalize_tag(v) in never_leave for v in values):
            return key  # {"label": "private"}, {"tags": ["pii"]}
    return None


def _edits(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours that turn a into b (at most a few: tags)."""
    if abs(len(a) - len(b)) > 2:
        return 3
    before, row = None, list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (x != y))
            if before is not None and j > 1 and x == b[j - 2] and a[i - 2] == y:  # before: row i - 2
                cost = min(cost, before[j - 2] + 1)
            current.append(cost)
        before, row = row, current
    return row[-1]
