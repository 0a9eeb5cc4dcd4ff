"""calc: a tiny statistics library in pure Python."""


def mean(xs):
    return sum(xs) / len(xs)


def median(xs):
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def variance(xs):
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def stdev(xs):
    return variance(xs) ** 0.5


def mode(xs):
    counts = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    return max(counts, key=counts.get)


def clamp(x, lo, hi):
    return max(lo, min(x, hi))


def percentile(xs, p):
    s = sorted(xs)
    k = (len(s) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def dot(xs, ys):
    return sum(x * y for x, y in zip(xs, ys))


def normalize(xs):
    total = sum(xs)
    return [x / total for x in xs]


def cumulative_sum(xs):
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out
