#!/usr/bin/python3
"""Independent reference for the C++ WordPiece tokenizer (data/tokenizer.cpp).

A line-by-line reimplementation of Hugging Face's slow `BertTokenizer` (BasicTokenizer +
WordpieceTokenizer + the added-token split of PreTrainedTokenizer.tokenize) using only the
Python standard library, so that tests need neither `transformers` nor the C++ code under
test to know the expected tokens. Run with Debian's /usr/bin/python3:

    /usr/bin/python3 tests/reference/bert_tokenizer_reference.py \
        tests/data/vocab_small/vocab.txt tests/data/tokenizer_cases.txt \
        > tests/data/tokenizer_expected.json
    /usr/bin/python3 tests/reference/bert_tokenizer_reference.py --fuzz 200 2024 \
        > tests/data/tokenizer_fuzz_expected.json

tokenizer_cases.txt: one case per line, `config<TAB>text_a[<TAB>text_b]`, with config one of
`lower` (do_lower_case, accents stripped), `lower_keep_accents` (strip_accents=False),
`cased` (no lowercasing, no stripping), `cased_strip` (strip_accents=True) and optional
`,max=N` (truncation longest-first + padding to N). Text uses \\uXXXX / \\UXXXXXXXX / \\t / \\n
escapes so that control characters survive in the case file.
"""
import json
import sys
import unicodedata

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def is_whitespace(ch):
    if ch in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(ch) == "Zs"


def is_control(ch):
    if ch in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(ch).startswith("C")


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class BasicTokenizer:
    def __init__(self, do_lower_case, strip_accents, tokenize_chinese_chars=True):
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars

    def tokenize(self, text):
        text = self._clean_text(text)
        if self.tokenize_chinese_chars:
            text = "".join(" %s " % c if is_chinese_char(ord(c)) else c for c in text)
        text = unicodedata.normalize("NFC", text)
        split_tokens = []
        for token in text.strip().split():
            if self.do_lower_case:
                token = token.lower()
                if self.strip_accents is not False:
                    token = self._strip(token)
            elif self.strip_accents:
                token = self._strip(token)
            split_tokens.extend(self._split_on_punc(token))
        return " ".join(split_tokens).strip().split()

    @staticmethod
    def _strip(text):
        return "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")

    @staticmethod
    def _split_on_punc(text):
        output, start_new = [], True
        for ch in text:
            if is_punctuation(ch):
                output.append([ch])
                start_new = True
            else:
                if start_new:
                    output.append([])
                start_new = False
                output[-1].append(ch)
        return ["".join(x) for x in output]

    @staticmethod
    def _clean_text(text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or is_control(ch):
                continue
            out.append(" " if is_whitespace(ch) else ch)
        return "".join(out)


def wordpiece(token, vocab, unk="[UNK]", max_chars=100):
    chars = list(token)
    if len(chars) > max_chars:
        return [unk]
    out, start = [], 0
    while start < len(chars):
        end, cur = len(chars), None
        while start < end:
            sub = "".join(chars[start:end])
            if start > 0:
                sub = "##" + sub
            if sub in vocab:
                cur = sub
                break
            end -= 1
        if cur is None:
            return [unk]
        out.append(cur)
        start = end
    return out


def split_specials(text):
    """PreTrainedTokenizer.tokenize: special tokens are cut out first (earliest, longest)."""
    pieces, pos = [], 0
    while pos < len(text):
        best, best_tok = None, None
        for s in SPECIALS:
            p = text.find(s, pos)
            if p >= 0 and (best is None or p < best or (p == best and len(s) > len(best_tok))):
                best, best_tok = p, s
        if best is None:
            pieces.append((False, text[pos:]))
            break
        pieces.append((False, text[pos:best]))
        pieces.append((True, best_tok))
        pos = best + len(best_tok)
    return pieces


def tokenize(text, vocab, basic):
    out = []
    for special, piece in split_specials(text):
        if special:
            out.append(piece)
            continue
        for word in basic.tokenize(piece):
            out.extend(wordpiece(word, vocab))
    return out


def encode(a, b, vocab, basic, max_len):
    ta = tokenize(a, vocab, basic)
    tb = tokenize(b, vocab, basic) if b is not None else None
    if max_len is not None:
        n_special = 3 if tb is not None else 2
        # truncate_sequences, strategy longest_first: one token at a time from the longer.
        while len(ta) + (len(tb) if tb is not None else 0) + n_special > max_len:
            if tb is None or len(ta) > len(tb):
                ta = ta[:-1]
            else:
                tb = tb[:-1]
    tokens = ["[CLS]"] + ta + ["[SEP]"]
    types = [0] * len(tokens)
    if tb is not None:
        tokens += tb + ["[SEP]"]
        types += [1] * (len(tb) + 1)
    mask = [1] * len(tokens)
    if max_len is not None:
        while len(tokens) < max_len:
            tokens.append("[PAD]")
            types.append(0)
            mask.append(0)
    return tokens, types, mask


def unescape(s):
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape")


# Characters for the seeded fuzz cases: letters, precomposed and combining accents (several
# combining classes, so canonical reordering matters), Hangul syllables and conjoining jamo
# (NFC composes L+V(+T)), Indic vowel signs (Mc/Mn), Greek with sigma, Turkish dotted I,
# CJK and compatibility ideographs, ASCII and Unicode punctuation, symbols, spaces, line and
# paragraph separators, controls, format characters, NUL and U+FFFD.
FUZZ_POOL = (
    "aAbBeEiIoOsSzZ09 " "ÀÉéÏñÕøÅßĳŁǅ" "\u0300\u0301\u0308\u0327\u0323\u031B\u0345\u05B0\u0F71"
    "\uAC00\uD55C\u1100\u1161\u11A8\u1112\u1173" "\u0915\u093F\u0940\u094D\u0B47\u0B3E"
    "ΣσςΑΩΆΐ" "\u0130ıİ" "日本語\u4E2D\uF900\uF9D0\u3042\u30AB"
    "!?.,;:'\"()[]{}<>@#$%^&*-_+=|\\/~`" "«»“”‘’¡¿—–…·§¶、。！？「」" "€$£©®™°±×÷√∞"
    "\t\n\r\u00A0\u2003\u3000\u2028\u2029" "\u0007\u001F\u0085\u00AD\u200B\u200D\u200E\uFEFF"
    "\u0000\uFFFD" "ﬁＡｂ１"
    "\U0001D158\U0001D165\U0001D16E\u0915\u093C"  # pairs whose composition is excluded
)


def fuzz_cases(count, seed):
    """Strings over FUZZ_POOL, and every fourth one also over all assigned code points."""
    import random
    rng = random.Random(seed)
    wide = [chr(c) for c in range(0x30000)
            if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != "Cn"]
    cases = []
    for i in range(count):
        n = rng.randint(1, 24)
        if i % 4 == 3:
            cases.append("".join(rng.choice(wide) if rng.random() < 0.6 else rng.choice(FUZZ_POOL)
                                 for _ in range(n)))
        else:
            cases.append("".join(rng.choice(FUZZ_POOL) for _ in range(n)))
    return cases


def main():
    if sys.argv[1] == "--fuzz":
        # Basic-tokenizer words of seeded random strings under every configuration.
        count, seed = int(sys.argv[2]), int(sys.argv[3])
        configs = {
            "lower": BasicTokenizer(True, None),
            "lower_keep_accents": BasicTokenizer(True, False),
            "cased": BasicTokenizer(False, None),
            "cased_strip": BasicTokenizer(False, True),
        }
        cases = [{"text": t, "words": {name: b.tokenize(t) for name, b in configs.items()}}
                 for t in fuzz_cases(count, seed)]
        json.dump({"unicode_version": unicodedata.unidata_version, "cases": cases}, sys.stdout,
                  ensure_ascii=False, separators=(",", ":"))
        sys.stdout.write("\n")
        return
    vocab_file, cases_file = sys.argv[1], sys.argv[2]
    with open(vocab_file, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    vocab = {t: i for i, t in enumerate(tokens)}
    configs = {
        "lower": BasicTokenizer(True, None),
        "lower_keep_accents": BasicTokenizer(True, False),
        "cased": BasicTokenizer(False, None),
        "cased_strip": BasicTokenizer(False, True),
    }
    results = []
    with open(cases_file, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            fields = line.split("\t")
            config, *opts = fields[0].split(",")
            max_len = None
            for o in opts:
                if o.startswith("max="):
                    max_len = int(o[4:])
            a = unescape(fields[1])
            b = unescape(fields[2]) if len(fields) > 2 else None
            basic = configs[config]
            entry = {"config": fields[0], "a": a, "tokens_a": tokenize(a, vocab, basic)}
            if b is not None:
                entry["b"] = b
            tokens, types, mask = encode(a, b, vocab, basic, max_len)
            entry.update({"tokens": tokens, "type_ids": types, "attention_mask": mask,
                          "ids": [vocab[t] for t in tokens]})
            if max_len is not None:
                entry["max_length"] = max_len
            results.append(entry)
    json.dump({"unicode_version": unicodedata.unidata_version, "cases": results},
              sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
