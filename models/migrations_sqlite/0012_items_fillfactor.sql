-- PostgreSQL's 0012 leaves room on drift_items' pages for items rewritten
-- in place; SQLite has no fill factor. The version is kept so both
-- dialects list the same migrations.
SELECT 1;
