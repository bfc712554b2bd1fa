-- See the PostgreSQL migration of the same name.
CREATE TABLE IF NOT EXISTS reconciler_carry (
    run_id      INTEGER NOT NULL,
    provider_id TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    PRIMARY KEY (run_id, provider_id)
);
