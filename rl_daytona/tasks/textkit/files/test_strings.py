from textkit.strings import count_vowels, initials, is_palindrome, pad_left, slugify, truncate


def test_slugify_words():
    assert slugify("Hello World") == "hello-world"


def test_slugify_sep():
    assert slugify("a b", sep="_") == "a_b"


def test_truncate_fits():
    assert truncate("hello", 5) == "hello"


def test_truncate_cut():
    assert truncate("hello world", 5) == "hell~"


def test_count_vowels_banana():
    assert count_vowels("banana") == 3


def test_count_vowels_none():
    assert count_vowels("xyz") == 0


def test_pad_left_zeros():
    assert pad_left("7", 3, "0") == "007"


def test_pad_left_long():
    assert pad_left("long", 2) == "long"


def test_is_palindrome_true():
    assert is_palindrome("Racecar")


def test_is_palindrome_false():
    assert not is_palindrome("abc")


def test_initials_two_names():
    assert initials("ada lovelace") == "AL"
