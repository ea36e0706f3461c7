"""Parse `key = value` lines into a dict of strings, and write them back."""

TRUE_WORDS = {"true", "yes", "on", "1"}
FALSE_WORDS = {"false", "no", "off", "0"}


def parse(text):
    """Blank lines and lines starting with '#' or ';' are ignored; keys and values are
    stripped; a later key overrides an earlier one."""
    result = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected 'key = value'")
        key, value = line.split("=", 1)
        result[key.strip()] = value.strip()
    return result


def get_bool(config, key, default=False):
    """config[key] read as a boolean: true/false, yes/no, on/off or 1/0, in any case."""
    if key not in config:
        return default
    word = config[key].lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{key}: {config[key]!r} is not a boolean")


def dump(config):
    """`key = value` lines, sorted by key, that parse() reads back."""
    return "".join(f"{key} = {config[key]}\n" for key in sorted(config))
