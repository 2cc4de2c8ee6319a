"""Typed records, the journal, run directories, and the public loader."""

from orchestrator.results.journal import Journal, MemoryJournal, read_journal
from orchestrator.results.records import Manifest, Record, TrialRecord
from orchestrator.results.store import RunDir, find_run
from orchestrator.results.trials import load_trials

__all__ = ["Journal", "Manifest", "MemoryJournal", "Record", "RunDir", "TrialRecord", "find_run", "load_trials",
           "read_journal"]
