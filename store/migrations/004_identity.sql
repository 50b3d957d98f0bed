-- Schema version 4: the database's own identity. Verdict files, engine logs and container
-- labels carry this id, so that two databases in one folder, or on one Docker host, never
-- take each other's files or containers for their own.
CREATE TABLE database_info (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO database_info (key, value) VALUES ('uuid',
    lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
    substr(lower(hex(randomblob(2))), 2) || '-' ||
    substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' ||
    lower(hex(randomblob(6))));
