-- The published guard on a mapped install (issue 18): the functions of
-- migration 0005, written in the application's names and state values by
-- AppSchema.SQL, and installed again by every reconciler migrate (and so
-- before every run, unless database.auto_migrate is false) with the mapping
-- that migrate reads: a changed mapping never leaves them stale for longer
-- than until the next migrate. They take and return OUR state names, as the
-- Go package guard.For(dialect, schema) does, and write the application's.

CREATE OR REPLACE FUNCTION reconciler_app_state(p_state text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v text;
BEGIN
  v := CASE p_state
    WHEN 'created'    THEN {'created'}
    WHEN 'authorised' THEN {'authorised'}
    WHEN 'captured'   THEN {'captured'}
    WHEN 'settled'    THEN {'settled'}
    WHEN 'refunded'   THEN {'refunded'}
    WHEN 'canceled'   THEN {'canceled'}
    WHEN 'failed'     THEN {'failed'}
    WHEN 'chargeback' THEN {'chargeback'}
  END;
  IF v IS NULL THEN
    RAISE EXCEPTION 'reconciler: unknown state %', coalesce(quote_literal(p_state), 'NULL')
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'want one of created, authorised, captured, settled, refunded, canceled, failed, chargeback (the reconciler''s names; the function writes the application''s)';
  END IF;
  RETURN v;
END $$;

-- The states (in the application's values) from which p_to (ours) may be
-- entered: models.Predecessors.
CREATE OR REPLACE FUNCTION reconciler_allowed_predecessors(p_to text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v text[];
BEGIN
  PERFORM reconciler_app_state(p_to); -- an unknown state is an error
  v := CASE p_to
    WHEN 'created'    THEN ARRAY[]::text[]
    WHEN 'authorised' THEN ARRAY[{'created'}]
    WHEN 'captured'   THEN ARRAY[{'created'}, {'authorised'}]
    WHEN 'settled'    THEN ARRAY[{'created'}, {'authorised'}, {'captured'}]
    WHEN 'refunded'   THEN ARRAY[{'created'}, {'authorised'}, {'captured'}, {'settled'}]
    WHEN 'canceled'   THEN ARRAY[{'created'}, {'authorised'}]
    WHEN 'failed'     THEN ARRAY[{'created'}, {'authorised'}, {'captured'}, {'settled'}]
    WHEN 'chargeback' THEN ARRAY[{'captured'}, {'settled'}, {'refunded'}]
  END;
  RETURN v;
END $$;

CREATE OR REPLACE FUNCTION reconciler_advance(p_provider text, p_provider_id text, p_to text,
    p_at timestamptz, p_amount_refunded bigint DEFAULT 0) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_preds text[] := reconciler_allowed_predecessors(p_to);
  v_to text := reconciler_app_state(p_to);
BEGIN
  IF p_at IS NULL THEN
    RAISE EXCEPTION 'reconciler_advance: p_at must not be null' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE {payments}
     SET {state} = v_to, {source_updated_at} = p_at,
         {amount_refunded} = GREATEST({amount_refunded},
             CASE WHEN p_to = 'canceled' THEN 0 ELSE coalesce(p_amount_refunded, 0) END)[[updated_at: ,
         {updated_at} = now()]]
   WHERE {provider} = p_provider AND {provider_id} = p_provider_id
     AND {state} = ANY (v_preds)
     AND ({source_updated_at} IS NULL OR {source_updated_at} <= p_at
          OR ({state} = {'settled'} AND p_to IN ('refunded', 'chargeback')));
  RETURN FOUND;
END $$;

CREATE OR REPLACE FUNCTION reconciler_raise_refund(p_provider text, p_provider_id text, p_amount bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE {payments} SET {amount_refunded} = p_amount[[updated_at: , {updated_at} = now()]]
   WHERE {provider} = p_provider AND {provider_id} = p_provider_id
     AND {amount_refunded} < p_amount AND {state} <> {'canceled'};
  RETURN FOUND;
END $$;

COMMENT ON FUNCTION reconciler_app_state(text) IS
  'reconciler guard, mapped install: the application''s value for a reconciler state (the schema section of the configuration reconciler migrate last read); an unknown state is an error.';
COMMENT ON FUNCTION reconciler_allowed_predecessors(text) IS
  'reconciler guard (DESIGN section 2), mapped install: the states, in the application''s values, from which the given reconciler state may be entered; an unknown state is an error.';
COMMENT ON FUNCTION reconciler_advance(text, text, text, timestamptz, bigint) IS
  'reconciler guard (DESIGN section 2), mapped install: as on a default install, in the application''s table, columns and state values (p_to is the reconciler''s state name); installed by reconciler migrate with the mapping it read.';
COMMENT ON FUNCTION reconciler_raise_refund(text, text, bigint) IS
  'reconciler guard, mapped install: raises the refunded amount to p_amount, never lowering it and never on a canceled payment; returns whether the row changed.';
