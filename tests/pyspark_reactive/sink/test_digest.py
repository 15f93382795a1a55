"""The digest of a staged partition (``sink/digest.py``): the same for the same rows however
they are cut into Arrow batches, and another for any change a forger could make, NULLs,
nested fields, lengths and row order included. No Spark here; ``tests/connect`` runs it
between a real stager and a real client."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from pyspark_reactive.sink.digest import DigestAsWritten, PartitionDigest, UndigestibleType

SCHEMA = pa.schema([
    ("id", pa.int64()), ("debit", pa.int64()), ("credit", pa.int64()),
    ("text", pa.string()), ("raw", pa.large_binary()), ("flag", pa.bool_()),
    ("amount", pa.decimal128(20, 3)), ("at", pa.timestamp("us", "UTC")),
    ("pair", pa.list_(pa.int64())),
    ("s", pa.struct([("amount", pa.int64()), ("tags", pa.map_(pa.string(), pa.string()))])),
])


def rows(n: int = 9) -> list[dict[str, Any]]:
    return [{"id": i, "debit": i * 100 if i % 2 == 0 else None,
             "credit": i * 100 if i % 2 else None, "text": None if i % 4 == 3 else f"t{i}",
             "raw": bytes([i]) * (i % 3), "flag": None if i == 5 else i % 2 == 0,
             "amount": Decimal(i) / 8, "at": 1_700_000_000_000_000 + i,
             "pair": None if i == 4 else [i, i + 1],
             "s": None if i == 6 else {"amount": i * 10, "tags": [("k", "v"), ("j", str(i))]}}
            for i in range(n)]


def digest(table: pa.Table | list[dict[str, Any]], *cuts: int) -> str:
    if isinstance(table, list):
        table = pa.Table.from_pylist(table, SCHEMA)
    check = PartitionDigest(table.schema)
    low = 0
    for high in [*cuts, table.num_rows]:
        check.update(table.slice(low, high - low))  # slices: offsets into shared buffers
        low = high
    return check.hexdigest()


def test_the_same_rows_cut_into_batches_anyhow_give_the_same_digest() -> None:
    table = pa.Table.from_pylist(rows(), SCHEMA)
    whole = digest(table)
    assert digest(table, 1, 2, 7) == digest(table, 5) == digest(table.combine_chunks()) == whole
    batches = PartitionDigest(SCHEMA)
    for batch in table.to_batches(max_chunksize=2):
        batches.update(batch)
    assert batches.hexdigest() == whole
    # Large string and list types (another session setting) carry the same values.
    large = pa.schema([pa.field(f.name, pa.large_string()) if f.type == pa.string() else f
                       for f in SCHEMA])
    assert digest(pa.Table.from_pylist(rows(), large)) == whole


def altered(change: Any) -> str:
    edited = rows()
    change(edited)
    return digest(edited)


@pytest.mark.parametrize("change", [
    # A value moved through a NULL: debit 200 becomes credit 200.
    lambda r: r[2].update(debit=None, credit=200),
    # A field inside a struct that holds a map; an entry of that map.
    lambda r: r[3]["s"].update(amount=999999),
    lambda r: r[3]["s"].update(tags=[("k", "v"), ("j", "forged")]),
    lambda r: r[3]["s"].update(tags=[("j", "3"), ("k", "v")]),
    # Two rows swapped; the last row gone; a row added.
    lambda r: r.__setitem__(slice(0, 2), [r[1], r[0]]),
    lambda r: r.pop(),
    lambda r: r.append(dict(r[0])),
    # Lengths that shift a boundary: strings, binaries, lists.
    lambda r: r[0].update(text="t0t") or r[1].update(text="1"),
    lambda r: r[1].update(pair=[1, 2, 2]) or r[2].update(pair=[3]),
    # NULL against an empty or zero value, a NULL struct against a struct of NULLs.
    lambda r: r[3].update(text=""),
    lambda r: r[0].update(raw=None),
    lambda r: r[4].update(pair=[]),
    lambda r: r[6].update(s={"amount": None, "tags": None}),
    lambda r: r[5].update(flag=False),
    lambda r: r[2].update(amount=Decimal("0.251")),
    lambda r: r[2].update(at=1_700_000_000_000_003),
])
def test_every_alteration_gives_another_digest(change: Any) -> None:
    assert altered(change) != digest(rows())


def test_a_value_under_a_null_slot_is_not_part_of_the_digest() -> None:
    # Arrow leaves a NULL slot's bytes undefined: two writers may leave different ones.
    values = pa.array([1, 2, 3], pa.int64())
    nulls = pa.array([True, False, True]).buffers()[1]
    left = pa.Array.from_buffers(pa.int64(), 3, [nulls, values.buffers()[1]])
    right = pa.Array.from_buffers(pa.int64(), 3, [nulls, pa.array([1, 77, 3],
                                                                   pa.int64()).buffers()[1]])
    assert left.to_pylist() == right.to_pylist() == [1, None, 3]
    one, two = PartitionDigest(pa.schema([("x", pa.int64())])), PartitionDigest(
        pa.schema([("x", pa.int64())]))
    one.update(pa.table({"x": left}))
    two.update(pa.table({"x": right}))
    assert one.hexdigest() == two.hexdigest()


def test_a_type_with_no_canonical_form_is_refused_naming_the_column() -> None:
    union = pa.sparse_union([pa.field("a", pa.int64())])
    with pytest.raises(UndigestibleType, match=r"column 's\.u' is of the Arrow type"):
        PartitionDigest(pa.schema([("s", pa.struct([("u", union)]))]))


def test_the_write_pass_numbers_the_rows_and_digests_the_partition() -> None:
    table = pa.Table.from_pylist(rows(), SCHEMA)
    framed = table.append_column("p", pa.array([3] * table.num_rows, pa.int32()))
    out = pa.Table.from_batches(list(DigestAsWritten(len(SCHEMA))(
        iter(framed.to_batches(max_chunksize=4)))))
    assert out.column("__reactive_seq").to_pylist() == list(range(9))
    marks = [m for m in out.column("__reactive_digest").to_pylist() if m is not None]
    assert marks == [f"3:9:{digest(table)}"]
    assert out.select(SCHEMA.names).equals(table)
    assert list(DigestAsWritten(len(SCHEMA))(iter([]))) == []
