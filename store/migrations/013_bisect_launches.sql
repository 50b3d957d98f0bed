-- Schema version 13: a bisection's steps decide on launches. Each look of a step is one
-- launch of each side; launch_icc is the most the launches of one configuration may
-- differ (intra-launch correlation of corruption) that a step's clean bound allows for.
-- NULL marks a bisection recorded when steps decided on sessions, which this schema's
-- arbiter reports but does not judge again.
ALTER TABLE bisections ADD COLUMN launch_icc REAL;
