"""The hosts and slots of a Slurm allocation, for mxplugin-run inside
`salloc` or `sbatch` without -H: read from the variables Slurm sets in the
allocation (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), in Slurm's own
compressed forms ("node[01-03,7],gpu5", "2(x3),1")."""
import re

from mxplugin_run.hosts import UsageError

_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _split_top_level(text):
    """Splits at commas outside brackets: "a[1,2],b" -> ["a[1,2]", "b"]."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"bad Slurm host list {text!r}: unmatched ']'")
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise UsageError(f"bad Slurm host list {text!r}: unmatched '['")
    parts.append(text[start:])
    return [p for p in parts if p]


def _range_values(spec, whole):
    """"01-03,7" -> ["01", "02", "03", "7"] (zero padding kept)."""
    values = []
    for item in spec.split(","):
        low, sep, high = item.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"bad Slurm host list {whole!r}: range {item!r}")
        if not sep:
            values.append(low)
            continue
        if int(high) < int(low):
            raise UsageError(f"bad Slurm host list {whole!r}: range {item!r} runs backwards")
        values += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return values


def _expand_one(pattern, whole):
    """"rack[1-2]-n[3-4]" -> rack1-n3, rack1-n4, rack2-n3, rack2-n4 (in Slurm's order)."""
    open_at = pattern.find("[")
    if open_at < 0:
        return [pattern]
    close_at = pattern.find("]", open_at)
    head, spec, tail = pattern[:open_at], pattern[open_at + 1:close_at], pattern[close_at + 1:]
    rests = _expand_one(tail, whole)
    return [head + value + rest for value in _range_values(spec, whole) for rest in rests]


def expand_hostlist(text):
    """Slurm's compressed host list as host names, in order."""
    return [host for part in _split_top_level(text.strip()) for host in _expand_one(part, text)]


def expand_counts(text):
    """"2(x3),1" -> [2, 2, 2, 1]."""
    counts = []
    for item in text.strip().split(","):
        m = _REPEAT.match(item.strip())
        if not m:
            raise UsageError(f"bad Slurm task count list {text!r}: {item!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def allocation_hosts(env):
    """[(host, slots)] of the Slurm allocation this process runs in, or None
    outside one. Slots are the tasks Slurm placed on each node
    (SLURM_TASKS_PER_NODE, from -n/--ntasks), else its CPUs
    (SLURM_JOB_CPUS_PER_NODE)."""
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not env.get("SLURM_JOB_ID") or not nodes:
        return None
    hosts = expand_hostlist(nodes)
    counts_text = env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_JOB_CPUS_PER_NODE")
    if not counts_text:
        return [(host, 1) for host in hosts]
    counts = expand_counts(counts_text)
    if len(counts) != len(hosts):
        raise UsageError(f"the Slurm allocation lists {len(hosts)} nodes ({nodes}) but {len(counts)} task counts "
                         f"({counts_text}); give the hosts with -H")
    return list(zip(hosts, counts))
