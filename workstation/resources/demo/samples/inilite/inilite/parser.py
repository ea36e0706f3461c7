"""Parse `key = value` lines into a dict of strings."""


def parse(text):
    """Blank lines and lines starting with '#' or ';' are ignored; keys and values are
    stripped; a later key overrides an earlier one."""
    result = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected 'key = value'")
        key, value = line.split("=", 1)
        result[key.strip()] = value.strip()
    return result
