-- Installed with guard_mapped.sql when the mapping names both settled_at
-- and payout_id (without them there is no settlement to record).
CREATE OR REPLACE FUNCTION reconciler_record_settlement(p_provider text, p_provider_id text,
    p_payout_id text, p_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF p_at IS NULL THEN
    RAISE EXCEPTION 'reconciler_record_settlement: p_at must not be null' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE {payments} SET {settled_at} = p_at, {payout_id} = coalesce(NULLIF(p_payout_id, ''), {payout_id})[[updated_at: ,
         {updated_at} = now()]]
   WHERE {provider} = p_provider AND {provider_id} = p_provider_id
     AND ({settled_at} IS NULL
          OR (NULLIF(p_payout_id, '') IS NOT NULL AND {payout_id} IS DISTINCT FROM p_payout_id AND {settled_at} <= p_at));
  RETURN FOUND;
END $$;

COMMENT ON FUNCTION reconciler_record_settlement(text, text, text, timestamptz) IS
  'reconciler guard (DESIGN section 2), mapped install: records that payout p_payout_id paid the payment out at provider time p_at, whatever the state, in the application''s columns; returns whether the row changed.';
