"""What tests share: the in-process engine (``engine``), the stack of real ``raas`` processes
(``stack``), reading what iterations left behind (``records``), sandbox labels (``sandboxes``),
the links in an unpacked directory (``trees``), the state machine on SQLite for specs of its
rules (``coordinator``) and the fault-test rig (``faults``). Fixtures stay in the conftest files;
these are plain modules.
"""
