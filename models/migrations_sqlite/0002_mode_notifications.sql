-- Kept in step with migrations/0002 (mode and sent_notifications are in 0001 here).
SELECT 1;
