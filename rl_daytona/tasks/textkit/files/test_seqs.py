from textkit.seqs import chunk, count_above, last_index, rotate, scale, split_even, window_sums


def test_chunk_uneven():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_window_sums_pairs():
    assert window_sums([1, 2, 3, 4], 2) == [3, 5, 7]


def test_last_index_repeated():
    assert last_index([5, 1, 5], 5) == 2


def test_last_index_first_only():
    assert last_index([5, 1, 2], 5) == 0 and last_index([], 3) == -1


def test_count_above_strict():
    assert count_above([1, 5, 7], 5) == 1


def test_rotate_one():
    assert rotate([1, 2, 3, 4], 1) == [2, 3, 4, 1]


def test_rotate_wraps():
    assert rotate([1, 2, 3], 4) == [2, 3, 1] and rotate([], 3) == []


def test_scale_offset():
    assert scale([1, 2], 2, 1) == [3, 5]


def test_split_even_remainder():
    assert split_even(7, 3) == [3, 2, 2]
