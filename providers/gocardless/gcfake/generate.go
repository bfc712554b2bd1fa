package gcfake

import (
	"math/rand/v2"
	"slices"
	"time"
)

// GenOptions configures Server.Generate.
type GenOptions struct {
	Payments   int
	Start, End time.Time
	Seed       int64
}

// Generate adds o.Payments GBP Bacs payments created uniformly over
// [Start, End), with realistic timelines on working days (Saturdays and
// Sundays skipped, bank holidays ignored): submitted the next working day at
// about 15:00, confirmed three working days later at about 06:00, paid out
// one working day later at 07:00 (one payout a day sweeps every payment
// paid out that day). Variations, by share of payments: ~2% cancelled
// before submission; ~1% start pending_customer_approval and are denied;
// ~3% fail late (half on the payout day before the payout, half 1-2 working
// days after being paid out, the latter settled against the next working
// day's payout with late_failure_settled, links.payout that payout and a
// payment_failed item in it); every one of these failures is
// final (details.will_attempt_retry false); ~1% charged back 2-8 weeks
// after the payout, a third of them with chargeback_cancelled a week later;
// ~1% are Success+ payments (retry_if_possible true) that fail on the
// charge date for insufficient funds (refer_to_payer, ARUDD-0) with
// will_attempt_retry true, are resubmitted by GoCardless minutes to two
// hours later (resubmission_requested, cause payment_autoretried) for a
// charge date two working days on, and then run the normal cycle, a third
// of them failing again on the retry, finally (will_attempt_retry false);
// ~3% refunded a week after the payout (half partly, half fully), paid the
// next working day (amount_refunded raised at the refund's creation).
// Every paid_out event carries links.payout. A step that would fall at or
// after End is not emitted, nor anything after it. Amounts are 100..50000 pence. Deterministic for a
// given Seed (and server Seed, for the ids).
func (s *Server) Generate(o GenOptions) {
	if o.Payments <= 0 || !o.End.After(o.Start) {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6CBAC5))
	start, end := ms(o.Start), ms(o.End)
	if end <= start {
		return
	}
	times := make([]int64, o.Payments)
	for i := range times {
		times[i] = start + rng.Int64N(end-start)
	}
	slices.Sort(times)
	last := end - 1

	s.mu.Lock()
	defer s.mu.Unlock()
	n := o.Payments
	s.pms = slices.Grow(s.pms, n)
	s.events = slices.Grow(s.events, n*43/10)
	s.eventOrder.Idx = slices.Grow(s.eventOrder.Idx, n*43/10)
	s.typeOrder[rtPayments].Idx = slices.Grow(s.typeOrder[rtPayments].Idx, n*42/10)
	s.pmOrder.Idx = slices.Grow(s.pmOrder.Idx, n)
	gbp := s.currencyCode("GBP")

	const hour = int64(time.Hour / time.Millisecond)
	const minute = int64(time.Minute / time.Millisecond)
	jitter := func(maxMS int64) int64 { return rng.Int64N(maxMS) }
	payouts := map[int32]int32{} // day → payout
	payoutAt := func(day int32) int64 { return int64(day)*dayMS + 7*hour }
	payoutOn := func(day int32) int32 {
		po, ok := payouts[day]
		if !ok {
			po = s.newPayout(payoutAt(day), gbp)
			payouts[day] = po
		}
		return po
	}
	payOut := func(pm int32, day int32) { s.payOut(payoutOn(day), pm, payoutAt(day)) }
	// workingAt returns a time on the first working day at or after day.
	workingAt := func(day int32, h int64, spread int64) int64 {
		for !working(day) {
			day++
		}
		return int64(day)*dayMS + h*hour + jitter(spread)
	}

	for _, t0 := range times {
		amount := 100 + rng.Int64N(49901)
		r := rng.IntN(100)
		half := rng.IntN(2) == 0
		third := rng.IntN(3) == 0
		status := "pending_submission"
		if r == 2 {
			status = "pending_customer_approval"
		}
		pm := s.createPayment(amount, gbp, t0, status)
		subDay := addWorkingDays(dayOf(t0), 1)
		tSub := int64(subDay)*dayMS + 15*hour + jitter(30*minute)
		switch r {
		case 0, 1: // cancelled before submission
			if t := t0 + minute + jitter(tSub-t0-minute); t <= last {
				s.setStatus(pm, "cancelled", "cancelled", varDefault, t, stCanceled)
			}
			continue
		case 2: // customer approval denied
			if t := t0 + 10*minute + jitter(min(48*hour, tSub-t0-10*minute)); t <= last {
				s.setStatus(pm, "customer_approval_denied", "customer_approval_denied", varDefault, t, stCanceled)
			}
			continue
		}
		if tSub > last {
			continue
		}
		s.setStatus(pm, "submitted", "submitted", varDefault, tSub, stAuthorised)
		confDay := addWorkingDays(subDay, 3)
		tConf := int64(confDay)*dayMS + 6*hour + jitter(30*minute)
		if r == 7 { // Success+: fails on the charge date, GoCardless retries it
			s.pms[pm].retry = true
			if tConf > last {
				continue
			}
			s.fail(pm, tConf, varReferToPayer, true)
			tRe := tConf + 5*minute + jitter(2*hour)
			if tRe > last {
				continue
			}
			subDay = addWorkingDays(confDay, 1)
			confDay = addWorkingDays(subDay, 3)
			s.autoRetry(pm, tRe, confDay)
			tSub = int64(subDay)*dayMS + 15*hour + jitter(30*minute)
			if tSub > last {
				continue
			}
			s.setStatus(pm, "submitted", "submitted", varDefault, tSub, stAuthorised)
			tConf = int64(confDay)*dayMS + 6*hour + jitter(30*minute)
			if third { // the retry fails too, finally
				if tConf <= last {
					s.fail(pm, tConf, varReferToPayer, false)
				}
				continue
			}
		}
		if tConf > last {
			continue
		}
		s.setStatus(pm, "confirmed", "confirmed", varDefault, tConf, stCaptured)
		payDay := addWorkingDays(confDay, 1)
		tPay := payoutAt(payDay)
		if r >= 3 && r <= 5 && half { // late failure before the payout
			if t := int64(payDay)*dayMS + 4*hour + jitter(hour); t <= last {
				s.fail(pm, t, varLateFailure, false)
			}
			continue
		}
		if tPay > last {
			continue
		}
		payOut(pm, payDay)
		switch {
		case r >= 3 && r <= 5: // late failure after the payout
			failDay := addWorkingDays(payDay, 1+rng.IntN(2))
			if t := int64(failDay)*dayMS + 5*hour + jitter(4*hour); t <= last {
				s.fail(pm, t, varLateFailure, false)
				// debited from the next working day's payout
				if setDay := addWorkingDays(failDay, 1); payoutAt(setDay) <= last {
					s.lateFailureSettled(pm, payoutAt(setDay), payoutOn(setDay))
				}
			}
		case r == 6: // chargeback, maybe cancelled
			t := workingAt(payDay+int32(14+rng.IntN(43)), 8, 8*hour)
			if t > last {
				continue
			}
			s.setStatus(pm, "charged_back", "charged_back", varDefault, t, stChargeback)
			if third {
				if t += 7 * dayMS; t <= last {
					s.setStatus(pm, "paid_out", "chargeback_cancelled", varDefault, t, stNone)
				}
			}
		case r >= 8 && r <= 10: // refunded a week later
			t := tPay + 7*dayMS + 2*hour + jitter(8*hour)
			if t > last {
				continue
			}
			ra := amount
			if half {
				ra = 1 + rng.Int64N(amount-1)
			}
			paid := t + int64(addWorkingDays(dayOf(t), 1)-dayOf(t))*dayMS
			if paid > last {
				paid = -1
			}
			s.refundPaid(pm, ra, t, paid)
		}
	}
}
