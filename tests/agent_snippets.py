"""Source shared by the agent modules the fault tests write into their projects (run in
subprocesses, so shared as text: each module is ``PRELUDE + its own classes``). Imports
nothing."""

#: The imports those agents use and ``_journaled()``: how many cases the run's journal (the
#: file named by the environment's ``JOURNAL``) holds so far, 0 before it exists. The agents
#: wait on it (an event in the run's own file), never on a wall-clock margin alone.
PRELUDE = '''
import json, os, time
from pytest_groundeval.tasks.extraction import active_medications

def _journaled():
    try:
        with open(os.environ["JOURNAL"]) as fh:
            return sum('"kind":"case"' in line for line in fh)
    except FileNotFoundError:
        return 0
'''
