"""textkit.seqs: small sequence helpers."""


def chunk(xs, size):
    return [xs[i:i + size] for i in range(0, len(xs), size)]


def window_sums(xs, k):
    return [sum(xs[i:i + k]) for i in range(len(xs) - k + 1)]


def last_index(xs, value):
    for i in range(len(xs) - 1, -1, -1):
        if xs[i] == value:
            return i
    return -1


def count_above(xs, limit):
    return sum(1 for x in xs if x > limit)


def rotate(xs, n):
    if not xs:
        return []
    n = n % len(xs)
    return xs[n:] + xs[:n]


def scale(xs, factor, offset=0):
    return [x * factor + offset for x in xs]


def split_even(total, parts):
    q, r = divmod(total, parts)
    return [q + 1] * r + [q] * (parts - r)
