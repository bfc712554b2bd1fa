-- One guard, published (DESIGN section 2): the guard as functions any
-- application can call from its own webhook worker, inside its own
-- transaction, so that the worker and the reconciler move rows by exactly the
-- same rule. The importable Go package github.com/reconciler/reconciler/guard
-- runs the same rule as plain SQL (also on the embedded SQLite store, which
-- has no functions); the tests require both, and the engine's batched
-- statements, to decide every case identically.
--
-- The functions are created in the current schema, like the tables, and
-- resolve payments by the caller's search_path at run time (search_path is
-- deliberately not pinned: a deployment may live in its own schema).

-- app-tables: begin (the application's tables: left out of a mapped install, issue 18)
-- The states from which p_to may be entered: models.Predecessors. An unknown
-- state is an error.
CREATE OR REPLACE FUNCTION reconciler_allowed_predecessors(p_to text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v text[];
BEGIN
  v := CASE p_to
    WHEN 'created'    THEN ARRAY[]::text[]
    WHEN 'authorised' THEN ARRAY['created']
    WHEN 'captured'   THEN ARRAY['created', 'authorised']
    WHEN 'settled'    THEN ARRAY['created', 'authorised', 'captured']
    WHEN 'refunded'   THEN ARRAY['created', 'authorised', 'captured', 'settled']
    WHEN 'canceled'   THEN ARRAY['created', 'authorised']
    WHEN 'failed'     THEN ARRAY['created', 'authorised', 'captured', 'settled']
    WHEN 'chargeback' THEN ARRAY['captured', 'settled', 'refunded']
  END;
  IF v IS NULL THEN
    RAISE EXCEPTION 'reconciler: unknown state %', coalesce(quote_literal(p_to), 'NULL')
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'want one of created, authorised, captured, settled, refunded, canceled, failed, chargeback';
  END IF;
  RETURN v;
END $$;

-- The guard: one conditional UPDATE, never read-then-write.
CREATE OR REPLACE FUNCTION reconciler_advance(p_provider text, p_provider_id text, p_to text,
    p_at timestamptz, p_amount_refunded bigint DEFAULT 0) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_preds text[] := reconciler_allowed_predecessors(p_to);
BEGIN
  IF p_at IS NULL THEN
    RAISE EXCEPTION 'reconciler_advance: p_at must not be null' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE payments
     SET state = p_to, source_updated_at = p_at,
         amount_refunded = GREATEST(amount_refunded,
             CASE WHEN p_to = 'canceled' THEN 0 ELSE coalesce(p_amount_refunded, 0) END),
         updated_at = now()
   WHERE provider = p_provider AND provider_id = p_provider_id
     AND state = ANY (v_preds)
     AND (source_updated_at IS NULL OR source_updated_at <= p_at
          OR (state = 'settled' AND p_to IN ('refunded', 'chargeback')));
  RETURN FOUND;
END $$;

-- amount_refunded only grows, and never on a canceled payment.
CREATE OR REPLACE FUNCTION reconciler_raise_refund(p_provider text, p_provider_id text, p_amount bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE payments SET amount_refunded = p_amount, updated_at = now()
   WHERE provider = p_provider AND provider_id = p_provider_id
     AND amount_refunded < p_amount AND state <> 'canceled';
  RETURN FOUND;
END $$;

-- Settlement is a fact of its own, recorded whatever the state: an empty
-- settled_at is filled in (keeping a payout id the row has when p_payout_id
-- is empty or null, i.e. unknown), and a different payout at a time no
-- earlier than the recorded one replaces it.
CREATE OR REPLACE FUNCTION reconciler_record_settlement(p_provider text, p_provider_id text,
    p_payout_id text, p_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF p_at IS NULL THEN
    RAISE EXCEPTION 'reconciler_record_settlement: p_at must not be null' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE payments SET settled_at = p_at, payout_id = coalesce(NULLIF(p_payout_id, ''), payout_id), updated_at = now()
   WHERE provider = p_provider AND provider_id = p_provider_id
     AND (settled_at IS NULL
          OR (NULLIF(p_payout_id, '') IS NOT NULL AND payout_id IS DISTINCT FROM p_payout_id AND settled_at <= p_at));
  RETURN FOUND;
END $$;

COMMENT ON FUNCTION reconciler_allowed_predecessors(text) IS
  'reconciler guard (DESIGN section 2): the states from which the given state may be entered (models.Predecessors); an unknown state is an error.';
COMMENT ON FUNCTION reconciler_advance(text, text, text, timestamptz, bigint) IS
  'reconciler guard (DESIGN section 2): moves payment (provider, provider_id) to state p_to established at provider time p_at, only from an allowed predecessor and never back in provider time (equal times pass), except that a refund or a lost dispute is never stale against a settlement (settled -> refunded/chargeback pass whatever the times). Raises amount_refunded to p_amount_refunded (never for canceled, never lowering it). Returns whether the row moved; false is not an error (someone got there first, the fact is stale, or there is no row). An unknown state is an error.';
COMMENT ON FUNCTION reconciler_raise_refund(text, text, bigint) IS
  'reconciler guard: raises amount_refunded to p_amount, never lowering it and never on a canceled payment; returns whether the row changed.';
COMMENT ON FUNCTION reconciler_record_settlement(text, text, text, timestamptz) IS
  'reconciler guard (DESIGN section 2): records that payout p_payout_id paid the payment out at provider time p_at, whatever the state: fills an empty settled_at (an empty or null p_payout_id keeps the row''s payout id), and replaces a different payout recorded at an earlier or equal time. Returns whether the row changed.';
-- app-tables: end
