-- Schema version 3: resuming an experiment re-runs the launches that did not finish. The
-- new run supersedes the old one, which is kept (with its turns) but left out of the
-- analysis.
ALTER TABLE runs ADD COLUMN superseded_by INTEGER REFERENCES runs(id);
