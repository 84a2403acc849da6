-- Large values compressed with lz4 rather than pglz (PostgreSQL's default) where the server has
-- it (PostgreSQL 14 and newer, built with lz4: the PGDG and Debian packages are). An agent's
-- input, output, terminal event, step results and thread messages are often past the ~2 kB
-- where TOAST compresses a value, and pglz is slow: a backend spent 1.9-2.0 ms of CPU inserting
-- a 67 kB conversation as jsonb with pglz, 0.70-0.77 ms with lz4, for 33 kB stored against 22 kB
-- (docs/operations.md, "Large values: TOAST compression"). Only what is written from now on is
-- compressed so; each ALTER changes the catalog alone (no rewrite), under an ACCESS EXCLUSIVE
-- lock of its table held until this file's transaction commits. Elsewhere (an older server, a
-- build without lz4) nothing changes: the statements are strings, parsed only where they run,
-- since PL/pgSQL checks a block's SQL when it compiles it and 12 and 13 have no SET COMPRESSION.
DO $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM pg_settings
    WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)
  ) THEN
    EXECUTE 'ALTER TABLE tether_invocations ALTER COLUMN input SET COMPRESSION lz4, '
      || 'ALTER COLUMN output SET COMPRESSION lz4, ALTER COLUMN checkpoint SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE tether_events ALTER COLUMN data SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE tether_steps ALTER COLUMN result SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE tether_waits ALTER COLUMN details SET COMPRESSION lz4, '
      || 'ALTER COLUMN value SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE tether_thread_messages ALTER COLUMN content SET COMPRESSION lz4';
  END IF;
END
$$;
