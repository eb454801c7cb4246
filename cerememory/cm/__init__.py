"""`cm`: procedural memory for coding agents, as a client of CMP.

Playbook rules, diary entries, outcomes and context logs live in Cerememory (through the
`MemoryAPI`, embedded or over HTTP); the layouts users keep in git (`.cass/playbook.yaml`,
`.cass/traumas.jsonl`, `.cass/config.json`) stay files.
"""

CM_VERSION = "0.2.13"
