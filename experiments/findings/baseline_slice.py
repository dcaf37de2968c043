"""What findings.sh reads of a baseline file (SET-baseline*.yaml): its keys,
and the held-out slice identity ga-run stores with each evaluation of it, so
that the script finds those evaluations in the results database."""
import os
import re


def key(text, name):
    """A top-level or nested `name: value` of the file's text (None if absent)."""
    m = re.search(rf"^\s*{name}:\s*([^#\n]+)", text, re.M)
    return m.group(1).strip() if m else None


def section(text, name):
    """The indented lines under a top-level `name:` (empty if absent)."""
    m = re.search(rf"^{name}:[^\n]*\n((?:[ \t]+[^\n]*\n?|\s*\n)*)", text, re.M)
    return m.group(1) if m else ""


def heldout_slice(path):
    """(three SQL LIKE patterns that together match the file's held-out
    slice in evaluations.dataset_slice, the number of items it holds)."""
    text = open(path).read()
    dataset = section(text, "dataset")
    seed, n = key(text, "seed"), key(dataset, "heldout_samples")
    # KV pairs or MDQA documents a prompt; only KV answers are primed.
    kind = key(dataset, "kind")
    chunks = key(dataset, "pairs") if kind == "kv" else key(dataset, "documents")
    primed = 1 if (key(dataset, "prime_answer") or "false").lower() == "true" else 0
    # Generated pairs, or a Lost-in-the-Middle file's, known by its name
    # (the identity adds its content hash).
    data = key(dataset, "file")
    source = "generated;" if data in (None, "null", "~") else os.path.basename(data.strip("'\"")) + "#"
    # One count for every position, or one per position ("[30, 100, 30]",
    # stored in the slice identity as "30/100/30").
    counts = [int(c) for c in n.strip("[]").split(",")]
    positions = len(key(dataset, "gold_positions").strip("[]").split(","))
    expected = sum(counts) if len(counts) > 1 else counts[0] * positions
    patterns = (f"%datasets-v1;kind={kind};source={source}%", f"%;chunks={chunks};%;primed={primed};%",
                f"%;split=heldout;samples={'/'.join(str(c) for c in counts)};seed={seed};%")
    return patterns, expected
