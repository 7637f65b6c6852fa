"""ilmek.redact: hostile text made safe to print, passwords masked in every DSN form."""

from __future__ import annotations

import random
import time
import unicodedata
import urllib.parse

import pytest

from ilmek.redact import MASK, connection_secrets, dsn_secrets, mask_dsn, mask_secrets, printable

UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"}

HOSTILE = [
    "\x1b]0;pwned\x07",  # set the window title
    "\x1b[2J\x1b[H",  # clear the screen, cursor home
    "\x9b2J",  # the same through the one-byte C1 CSI
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",  # a hyperlink
    "\x1bP+q544e\x1b\\",  # a DCS query the terminal answers on stdin
    "safe\rforged line",  # overwrite the start of the line
    "invoice\u202efdp.exe",  # right-to-left override: reads as "invoiceexe.pdf"
    "\u2066isolated\u2069 \u202aembedded\u202c \u202bx\u202d",
    "zero\u200bwidth\u200d\ufeff",
    "line\u2028separator\u2029",
    "lone \udcff surrogate \ud800",
    "\x00nul\x7fdel\x85nel",
]


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` that printable() must never let through."""
    return [char for char in text if unicodedata.category(char) in UNSAFE_CATEGORIES]


@pytest.mark.parametrize("text", HOSTILE)
def test_printable_leaves_no_control_character(text: str) -> None:
    """Every hostile string comes out with no control, format or surrogate character."""
    shown = printable(text)
    assert [] == unsafe(shown)
    assert shown.isascii() or all(char.isprintable() for char in shown)


def test_printable_escapes_every_unsafe_code_point() -> None:
    """Across the planes with assigned characters, no unsafe code point survives unescaped."""
    everything = "".join(map(chr, [*range(0x20000), *range(0xE0000, 0xF0000)]))
    shown = printable(everything)
    assert [] == unsafe(shown)
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        assert f"\\x{code:02x}" in shown or chr(code) in "\n\r\t"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x1b", "\\x1b"),
        ("\x07", "\\x07"),
        ("\x00", "\\x00"),
        ("\x7f", "\\x7f"),
        ("\x9b", "\\x9b"),
        ("\n", "\\n"),
        ("\r", "\\r"),
        ("\t", "\\t"),
        ("\u202e", "\\u202e"),
        ("\u2066", "\\u2066"),
        ("\u2069", "\\u2069"),
        ("\u2028", "\\u2028"),
        ("\udcff", "\\udcff"),
        ("\U000e0001", "\\U000e0001"),
    ],
)
def test_printable_escape_forms(text: str, expected: str) -> None:
    """C0, DEL and C1 print as \\xHH (LF, CR, TAB as in repr), wider ones as \\uHHHH or \\UHHHHHHHH."""
    assert expected == printable(text)


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii ~!@#$%^&*()",
        "C:\\Users\\me\\store.db",
        "emoji 😀🎉 and accents éøß",
        "日本語のテキスト",
        "عربي",  # right-to-left script itself is fine; only the overrides are not
        "non\u00a0breaking space",
        "",
    ],
)
def test_printable_leaves_printable_text_unchanged(text: str) -> None:
    """Text with nothing to escape (backslashes, scripts, emoji, spaces) comes back identical."""
    assert text == printable(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_printable_is_idempotent(text: str) -> None:
    """Escaping escaped text changes nothing: output can be escaped again safely."""
    once = printable(text)
    assert once == printable(once)


def test_printable_keeps_laid_out_newlines_only_when_asked() -> None:
    """keep_newlines leaves LF as a line break and still escapes CR and every other control."""
    assert "a\nb\\r\\x1b" == printable("a\nb\r\x1b", keep_newlines=True)
    assert "a\\nb" == printable("a\nb")


# --- passwords in connection strings -----------------------------------------------------------

DSNS = [
    ("postgresql://shop:s3cret@db.example:5432/shop", "postgresql://shop:***@db.example:5432/shop", "s3cret"),
    ("postgres://shop:s3cret@db.example/shop", "postgres://shop:***@db.example/shop", "s3cret"),
    ("postgresql://:s3cret@db.example/shop", "postgresql://:***@db.example/shop", "s3cret"),
    ("postgresql://shop:s%40cr%2Fet@db.example/shop", "postgresql://shop:***@db.example/shop", "s@cr/et"),
    ("postgresql://shop:p@ss/w?rd#x@db.example/shop", "postgresql://shop:***@db.example/shop", "p@ss/w?rd#x"),
    ("postgresql://shop:two words@db.example/shop", "postgresql://shop:***@db.example/shop", "two words"),
    ("postgresql://shop:s3cret@[::1/shop", "postgresql://shop:***@[::1/shop", "s3cret"),
    (
        "postgresql://shop@db.example/shop?password=s3cret",
        "postgresql://shop@db.example/shop?password=***",
        "s3cret",
    ),
    (
        "postgresql://shop@db.example/shop?sslmode=require&sslpassword=s3cret&connect_timeout=3",
        "postgresql://shop@db.example/shop?sslmode=require&sslpassword=***&connect_timeout=3",
        "s3cret",
    ),
    ("postgresql://db.example/shop?PassWord=s3cret", "postgresql://db.example/shop?PassWord=***", "s3cret"),
    (
        "postgresql://db.example/shop?pass%77ord=s3cret",
        "postgresql://db.example/shop?pass%77ord=***",
        "s3cret",
    ),
    (
        "postgresql:///shop?host=/run/pg&password=s3cret",
        "postgresql:///shop?host=/run/pg&password=***",
        "s3cret",
    ),
    ("host=db.example password=s3cret dbname=shop", "host=db.example password=*** dbname=shop", "s3cret"),
    (
        "host=db.example password='quoted s3cret' dbname=shop",
        "host=db.example password=*** dbname=shop",
        "quoted s3cret",
    ),
    ("host=db.example password = s3cret dbname=shop", "host=db.example password = *** dbname=shop", "s3cret"),
    ("password='it\\'s s3cret' host=db.example", "password=*** host=db.example", "it's s3cret"),
    ("host=db.example password='unterminated s3cret", "host=db.example password=***", "unterminated s3cret"),
    (
        "host=db.example password=two s3cret words dbname=shop",
        "host=db.example password=*** dbname=shop",
        "two s3cret words",
    ),
    ("host=db.example sslpassword=s3cret", "host=db.example sslpassword=***", "s3cret"),
    ("host=db.example PASSWORD=s3cret", "host=db.example PASSWORD=***", "s3cret"),
    ("host=db.example password=s3\\ cret dbname=shop", "host=db.example password=*** dbname=shop", "s3 cret"),
]


@pytest.mark.parametrize(("dsn", "expected", "secret"), DSNS)
def test_mask_dsn_hides_the_password_in_every_form(dsn: str, expected: str, secret: str) -> None:
    """URL user info, URL query (any case, encoded keys) and libpq keywords: the password becomes ***."""
    assert expected == mask_dsn(dsn)


@pytest.mark.parametrize(("dsn", "expected", "secret"), DSNS)
def test_mask_secrets_hides_a_dsn_quoted_in_a_message(dsn: str, expected: str, secret: str) -> None:
    """A message that echoes the DSN and quotes a fragment of the password shows neither."""
    fragment = secret.split()[-1][-4:]
    message = f'could not connect to "{dsn}": missing "=" after "{fragment}" in connection info string'
    masked = mask_secrets(message, dsn_secrets(dsn))
    assert secret not in masked
    assert f'"{fragment}"' not in masked
    assert urllib.parse.quote(secret, safe="") not in masked


@pytest.mark.parametrize(
    "dsn", ["/var/lib/store.db", "store.db", "host=db.example dbname=shop user=me", "postgresql://me@h/db"]
)
def test_mask_dsn_leaves_a_dsn_without_a_password_alone(dsn: str) -> None:
    """Paths, and DSNs with no password, are shown as typed."""
    assert dsn == mask_dsn(dsn)
    assert () == dsn_secrets(dsn)


def test_mask_dsn_is_idempotent() -> None:
    """Masking a masked DSN changes nothing."""
    for dsn, expected, _ in DSNS:
        assert expected == mask_dsn(mask_dsn(dsn))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "connect postgresql://u:hunter22@h/db failed",
            "connect postgresql://u:***@h/db failed",
        ),
        ("FATAL: bad password=hunter22 for u", "FATAL: bad password=*** for u"),
        ("options {'password': 'hunter22', 'host': 'h'}", "options {'password': ***, 'host': 'h'}"),
        ('{"sslpassword": "hunter22"}', '{"sslpassword": ***}'),
        ("client_secret=hunter22 pwd=x passwd=y", "client_secret=*** pwd=*** passwd=***"),
        ("jdbc:postgresql://u:hunter22@h/db", "jdbc:postgresql://u:***@h/db"),
        (
            "a postgresql://u:***@h/x,postgresql://v:hunter22@h2",
            "a postgresql://u:***@h/x,postgresql://v:***@h2",
        ),
        ("password authentication failed for user", "password authentication failed for user"),
    ],
)
def test_mask_secrets_in_free_text(text: str, expected: str) -> None:
    """URLs and key=value pairs anywhere in a message are masked; prose about passwords is not."""
    assert expected == mask_secrets(text)


def test_mask_secrets_masks_known_values_and_quoted_fragments() -> None:
    """Known secrets vanish wherever they appear; a short one only where a driver quotes it."""
    assert "token *** here" == mask_secrets("token hunter22 here", ["hunter22"])
    assert 'value "***" for "port"' == mask_secrets('value "pa" for "port"', ["pa/ss"])
    # Two letters masked everywhere would mangle the message: only quoted fragments are.
    assert "pass pa" == mask_secrets("pass pa", ["pa"])


def test_mask_dsn_hides_random_hostile_passwords() -> None:
    """Seeded: passwords full of URL and libpq syntax never survive, in any DSN form."""
    rng = random.Random(20240611)
    alphabet = "abcXYZ019 @:/?#&=%'\"\\+;,[]{}~$!"
    for _ in range(500):
        password = "Zq" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16))) + "Qz"
        encoded = urllib.parse.quote(password, safe="")
        escaped = password.replace("\\", "\\\\").replace("'", "\\'")
        dsns = [
            f"postgresql://shop:{encoded}@db.example/shop",
            f"postgresql://shop@db.example/shop?sslmode=disable&password={encoded}",
            f"host=db.example password='{escaped}' dbname=shop",
        ]
        if not set(password) & set("&#\n"):
            # Typed raw, not encoded: as long as the URL can still be read, it is masked.
            dsns.append(f"postgresql://shop@db.example/shop?password={password}")
        if "@" not in password and "/" not in password:
            dsns.append(f"postgresql://shop:{password}@db.example/shop")
        for dsn in dsns:
            masked = mask_dsn(dsn)
            assert password not in masked, dsn
            assert encoded not in masked or encoded == password, dsn
            assert MASK in masked
            message = mask_secrets(f"cannot open {dsn}: error near '{password[3:-3]}'", dsn_secrets(dsn))
            assert password not in message, dsn


@pytest.mark.parametrize(
    "text",
    [
        "cannot open host=h password=hunter22: connection refused",
        "cannot open postgresql://u@h/db?password=hunter22: refused",
        "cannot open postgresql://u:hunter22@h/db: refused by admin@example.com",
        "options {'password': 'hunter22', 'host': 'h'}",
    ],
)
def test_mask_secrets_twice_keeps_what_follows_the_mask(text: str) -> None:
    """Masking an already masked message changes nothing: the ': reason' after *** survives."""
    once = mask_secrets(text)
    assert "hunter22" not in once
    assert once == mask_secrets(once)


def test_masking_takes_time_linear_in_the_text() -> None:
    """A 200,000-character argument of letters, `?`, quotes or `password=` is masked in about a second."""
    texts = ["a" * 200_000, "?" * 200_000, '"' + "a" * 200_000, "password=" * 20_000]
    for text in [*texts, "x://a:" * 30_000, "x://a:b@" * 30_000, "x://a:***@" * 30_000 + "x://a:b@"]:
        started = time.perf_counter()
        mask_secrets(text, dsn_secrets(text))
        mask_dsn(text)
        assert time.perf_counter() - started < 5.0, text[:20]


@pytest.mark.parametrize(
    ("dsn", "message", "secret"),
    [
        (r"host=h password=x\ more", "could not connect at 'host=h password=x\\ more'", "x more"),
        ("postgresql://u:pw%zzsecret@h/db", 'invalid percent-encoded token: "pw%zzsecret"', "zzsecret"),
        ("postgresql://u:se@cret:pwTAIL@h:1/db", 'invalid integer value "pwTAIL@h:1" for "port"', "pwTAIL"),
        ("postgresql://u:hunter2@h:hunter2/db", 'invalid integer value "hunter2" for "port"', "hunter2"),
        ("host=h password=x topsecret", 'missing "=" after "topsecret" in connection info', "topsecret"),
        ("host=h password='it''s' port=1", "value 'it' then \"s\"", "it"),
    ],
)
def test_driver_messages_keep_no_piece_of_the_password(dsn: str, message: str, secret: str) -> None:
    """What libpq quotes back from a DSN it could not use (cut at @, :, space or a quote) is masked."""
    masked = mask_secrets(message, dsn_secrets(dsn))
    assert secret not in masked
    assert MASK in masked


def test_keyword_passwords_are_read_as_libpq_reads_them() -> None:
    """Quoted with escapes, unquoted with escapes, spaced around `=`: the value libpq uses is a secret."""
    assert "it's me" in dsn_secrets(r"host=h password = 'it\'s me' port=1")
    assert "a b" in dsn_secrets(r"password=a\ b host=h")
    assert "open ended" in dsn_secrets("host=h sslpassword='open ended")


def test_a_pool_s_options_give_its_secrets() -> None:
    """A pool's DSN and its password= keywords are both secrets; other values are not."""
    secrets = connection_secrets("host=h password=one1", {"password": "two2", "host": "db", "port": 5432})
    assert {"one1", "two2"} <= set(secrets)
    assert "db" not in secrets
    assert "three3" in connection_secrets(None, {"conninfo": "postgresql://u:three3@h/db"})


def test_every_run_of_four_characters_of_a_secret_is_masked() -> None:
    """A secret cut anywhere is hidden; text sharing fewer than four characters in a row is kept."""
    assert "at *** and *** ok" == mask_secrets("at cret:pw and TAIL ok", ["se@cret:pwTAIL"])
    assert "at cre and AIL" == mask_secrets("at cre and AIL", ["se@cret:pwTAIL"])
