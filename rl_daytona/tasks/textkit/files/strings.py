"""textkit.strings: small text helpers."""


def slugify(text, sep="-"):
    words = text.lower().split()
    return sep.join(words)


def truncate(text, width):
    if len(text) <= width:
        return text
    return text[: width - 1] + "~"


def count_vowels(text):
    total = 0
    for ch in text.lower():
        if ch in "aeiou":
            total += 1
    return total


def pad_left(text, width, fill=" "):
    return text.rjust(width, fill)


def is_palindrome(text):
    letters = [c for c in text.lower() if c.isalnum()]
    return letters == letters[::-1]


def initials(name):
    return "".join(p[0].upper() for p in name.split())
