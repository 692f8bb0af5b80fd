"""groupml.help(): the reference in psql."""

from __future__ import annotations

from ..errors import UndefinedObjectError
from ..helptopics import TOPICS, overview


def help_text(topic):
    if topic is None or topic.strip() == "":
        return overview()
    key = topic.strip().lower()
    if key.startswith("groupml."):
        key = key[len("groupml."):]
    if key not in TOPICS:
        raise_undefined(topic)
    return TOPICS[key]


def raise_undefined(topic):
    from . import raise_sql

    from ..validation import shown

    raise_sql(UndefinedObjectError(f"No help topic {shown(topic)}; topics are {', '.join(sorted(TOPICS))}",
                                   hint="Run SELECT groupml.help(); for the list of functions."))


def version_text():
    import numpy
    import scipy

    import groupml

    return (f"groupml {groupml.__version__} ({groupml.__file__.rsplit('/', 2)[0]}), numpy {numpy.__version__}, "
            f"scipy {scipy.__version__}")
