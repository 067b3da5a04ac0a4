import Foundation
import HTTPTypes
import Models
import ServiceKit
import Testing
import TestSupport
@testable import Training

/// Invitations' and auth's events in any order, the days of a time zone, and adherence.
@Suite struct SessionEventTests {
    /// An unlink delivered before the acceptance it follows: the entry ends up left, its sessions
    /// cancelled and the pair unlinked (the coach's exercises no longer the client's to use),
    /// whichever came first. Each event carries invitations' outbox number, as relayed: the
    /// acceptance's below the unlink's. A removed entry nobody accepted takes its sessions with it.
    @Test func rosterEventsSettleWhateverTheirOrder() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithInvitedClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])
            let unlinked = ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false, rosterEntryID: entry)
            try await env.publish(unlinked, userID: client.id, sequence: 3)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND stage = 2") == 1 }
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id, sequence: 2)
            try await env.publish(ClientInvited(rosterEntryID: entry, coachID: coach.id), userID: coach.id, sequence: 1)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") >= 4 }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND stage = 2 AND client_id = '\(client.id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM coach_links WHERE coach_id = '\(coach.id)' AND client_id = '\(client.id)'") == 0)
            #expect(try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(0))", as: client).items.isEmpty)
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: client).json["status"] as? String == "cancelled")
            #expect(try await env.call(.post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"]]).code == "client_not_linked")
            // Another coach cannot take the entry over by naming it in an event of theirs.
            let other = try await env.coach()
            try await env.publish(ClientInvited(rosterEntryID: entry, coachID: other.id), userID: other.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") >= 5 }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND coach_id = '\(coach.id)'") == 1)

            let pending = try await env.rosterEntry(of: coach)
            _ = try await env.assign(workout, to: pending, by: coach, on: [TrainingTestEnvironment.day(1), TrainingTestEnvironment.day(2)])
            try await env.publish(ClientRemoved(rosterEntryID: pending, coachID: coach.id), userID: coach.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM sessions WHERE roster_entry_id = '\(pending)'") == 0 }
            #expect(try await env.call(.get, "/v1/training/clients/\(pending)", as: coach).code == "client_not_found")
        }
    }

    /// An unlink written before events named the roster entry, heard before the acceptance it
    /// followed: the acceptance links nothing and ends the entry it names, as an unlink that named
    /// it would have; the coach plans nothing more for it. Heard again after a later acceptance, the
    /// unlink ends nothing.
    @Test func aLateAcceptanceEndsTheEntryAnUnlinkWithoutItLeft() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithInvitedClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])
            let handled = try await env.count("SELECT count(*) FROM inbox")
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false, rosterEntryID: nil), userID: client.id, sequence: 3)
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id, sequence: 2)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") >= handled + 2 }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND stage = 2 AND client_id = '\(client.id)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM coach_links WHERE coach_id = '\(coach.id)' AND client_id = '\(client.id)'") == 0)
            #expect(try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(0))", as: client).items.isEmpty)
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: client).json["status"] as? String == "cancelled")
            #expect(try await env.call(.post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"]]).code == "client_not_linked")
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)", as: coach).status == .conflict)

            // An acceptance after the unlink (a new invitation) links them again.
            let again = try await env.rosterEntry(of: coach)
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: again), userID: client.id, sequence: 4)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM coach_links WHERE coach_id = '\(coach.id)' AND client_id = '\(client.id)'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(again)' AND stage = 1") == 1)
            // The old unlink delivered once more, after that acceptance: it ends nothing of the
            // later link, which it came before.
            let heard = try await env.count("SELECT count(*) FROM inbox")
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false, rosterEntryID: nil), userID: client.id, sequence: 3)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") >= heard + 1 }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(again)' AND stage = 1") == 1)
            #expect(try await env.count("SELECT count(*) FROM coach_links WHERE coach_id = '\(coach.id)' AND client_id = '\(client.id)'") == 1)
        }
    }

    /// A client who accepted the same coach again (a second roster entry), the unlink between the
    /// two acceptances written before events named the entry and heard last; the first acceptance
    /// heard in its turn, or late (its handling failed once, and was retried after the second's).
    /// Either way the first entry ends, its plan cancelled, as invitations ended it before the second
    /// acceptance, and the second's plan is the client's.
    @Test(arguments: [false, true])
    func aSecondAcceptanceOfTheSameCoachEndsTheFirstEntry(firstHeardLate: Bool) async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, first, workout) = try await env.coachWithInvitedClient()
            let firstPlan = try await env.assign(workout, to: first, by: coach, on: [TrainingTestEnvironment.day(1)])
            let acceptFirst = InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: first)
            if !firstHeardLate {
                try await env.publish(acceptFirst, userID: client.id, sequence: 1)
                try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(first)' AND stage = 1") == 1 }
            }
            let second = try await env.rosterEntry(of: coach)
            let secondPlan = try await env.assign(workout, to: second, by: coach, on: [TrainingTestEnvironment.day(2)])
            let handled = try await env.count("SELECT count(*) FROM inbox")
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: second), userID: client.id, sequence: 3)
            if firstHeardLate { try await env.publish(acceptFirst, userID: client.id, sequence: 1) }
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false, rosterEntryID: nil), userID: client.id, sequence: 2)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") >= handled + (firstHeardLate ? 3 : 2) }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(first)' AND stage = 2") == 1)
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(second)' AND stage = 1") == 1)
            #expect(try await env.call(.get, "/v1/training/sessions/\(firstPlan[0])", as: client).json["status"] as? String == "cancelled")
            let week = try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(0))", as: client)
            #expect(week.ids == secondPlan, "\(week.text)")
            #expect(try await env.count("SELECT count(*) FROM coach_links WHERE coach_id = '\(coach.id)' AND client_id = '\(client.id)'") == 1)
        }
    }

    /// Plans that ended under the previous release, which cancelled only the scheduled sessions of a
    /// client who left or a coach whose account went: the migration cancels the skipped ones they
    /// left behind, as the handlers now do, and a skipped session of a plan still on stays skipped.
    @Test func skippedSessionsOfPlansEndedBeforeAreCancelled() async throws {
        try await TrainingTestEnvironment.run { env in
            var skipped: [String] = []
            var pairs: [(coach: TrainingTestEnvironment.User, entry: UUID)] = []
            for _ in 0..<3 {
                let (coach, client, entry, workout) = try await env.coachWithClient()
                let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(-1)])
                #expect(try await env.call(.post, "/v1/training/sessions/\(ids[0])/skip", as: client).status == .ok)
                skipped.append(ids[0])
                pairs.append((coach, entry))
            }
            // As the previous release left them: the first client left, the second one's coach was deleted.
            try await env.execute("UPDATE roster_entries SET stage = 2 WHERE id = '\(pairs[0].entry)'")
            try await env.execute("UPDATE sessions SET coach_id = NULL, roster_entry_id = NULL WHERE coach_id = '\(pairs[1].coach.id)'")
            try await env.execute("DELETE FROM roster_entries WHERE coach_id = '\(pairs[1].coach.id)'")
            let backfill = try #require(try TrainingService.definition.migrations().first { $0.name == "0006_skipped_sessions_of_ended_plans" })
            for statement in SQLScript.statements(backfill.sql) { try await env.execute(statement) }
            var cancelled: [Int] = []
            for id in skipped { cancelled.append(try await env.count("SELECT count(*) FROM sessions WHERE id = '\(id)' AND status = 'cancelled'")) }
            #expect(cancelled == [1, 1, 0])
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE id = '\(skipped[2])' AND status = 'skipped'") == 1)
        }
    }

    /// The address's owner proving it for the first time drops what the account's maker made here:
    /// as a client their sessions and logs, as a coach their workouts and plans.
    @Test func aDroppedMakerLeavesNothingOfTheirs() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])
            #expect(
                try await env.call(.post, "/v1/training/sessions/\(ids[0])/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [HTTPField.Name("Idempotency-Key")!: "maker-1"])
                    .status == .ok)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(client.id)'") == 1)
            _ = try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "Europe/Lisbon", "weight_unit": "lbs"])
            // A request of the maker's still running as the address changes hands: its key goes too.
            func claim(_ key: String, status: String) async throws {
                try await env.execute(
                    "INSERT INTO idempotency_keys (user_id, route, key, request_hash, claim_id, status) VALUES ('\(client.id)', 'POST /v1/training/settings', '\(key)', '\\x00', gen_random_uuid(), \(status))"
                )
            }
            try await claim("maker-2", status: "NULL")
            // The envelope's time is to the millisecond: the takeover comes clearly after that claim, on
            // the database's clock, which dates the claims.
            try await Task.sleep(for: .milliseconds(5))
            let takeover = Date(timeIntervalSince1970: Double(try await env.count("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8")) / 1000)
            // The new owner's requests between the takeover and the event's handling: one still
            // running, theirs and kept; one answered, whose rows the purge takes, and its answer too.
            try await claim("owner-1", status: "NULL")
            try await claim("owner-2", status: "200")
            try await EventStream(redis: env.redis, name: env.config.events.stream).publish(
                UserPasswordChanged(userID: client.id, method: .reset, makerDropped: true), producer: "auth", userID: client.id, occurredAt: takeover)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM sessions") == 0 }
            #expect(try await env.count("SELECT count(*) FROM session_sets") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(client.id)' AND key LIKE 'maker-%'") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(client.id)' AND key LIKE 'owner-%'") == 1)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(client.id)' AND key = 'owner-1'") == 1)
            #expect(try await env.call(.get, "/v1/training/settings", as: client).json["weight_unit"] as? String == "kg")
            #expect(try await env.count("SELECT count(*) FROM coach_links") == 0)
            // The account stays: no tombstone.
            #expect(try await env.count("SELECT count(*) FROM deleted_accounts") == 0)

            try await env.publish(UserPasswordChanged(userID: coach.id, method: .change, makerDropped: false), userID: coach.id, producer: "auth")
            try await env.publish(UserPasswordChanged(userID: coach.id, method: .disowned), userID: coach.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM workouts") == 0 }
            // The entries stay, removed: an acceptance heard late finds them ended.
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE stage <> 3") == 0)
        }
    }

    /// An acceptance sent before the coach's maker was dropped and heard after it: the entry the drop
    /// ended is not made again, and the account's new owner coaches nobody through it.
    @Test func anAcceptanceHeardAfterTheCoachsMakerWasDroppedLinksNothing() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithInvitedClient()
            _ = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])
            try await env.publish(UserPasswordChanged(userID: coach.id, method: .disowned), userID: coach.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM workouts") == 0 }
            let handled = try await env.count("SELECT count(*) FROM inbox")
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") > handled }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND stage = 3") == 1)
            // The account's new owner, with a workout of their own.
            let created = try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Pushups")))
            let fresh = try #require(created.json["id"] as? String, "\(created.text)")
            #expect(fresh != workout)
            let refused = try await env.call(.post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": fresh, "dates": ["2030-01-01"]])
            #expect(refused.code == "client_not_linked", "\(refused.text)")
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)", as: coach).code == "client_not_found")
            #expect(try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(0))", as: client).items.isEmpty)
        }
    }

    /// A client's account deleted before their acceptance (or unlink) was heard here: the deletion
    /// found no entry naming them, so the acceptance that follows leaves the entry, and the sessions
    /// planned for it go, without naming the account anywhere.
    @Test(arguments: ["accepted", "unlinked"]) func aClientDeletedBeforeTheirAcceptanceLeavesTheEntry(_ late: String) async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithInvitedClient()
            _ = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1), TrainingTestEnvironment.day(2)])
            try await env.publish(UserDeleted(userID: client.id), userID: client.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM deleted_accounts") == 1 }
            if late == "accepted" {
                try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
            } else {
                try await env.publish(
                    ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .clientDeleted, hasOtherCoach: false, rosterEntryID: entry), userID: client.id)
            }
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND stage = 2") == 1 }
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE roster_entry_id = '\(entry)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE client_id = '\(client.id)'") == 0)
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)", as: coach).code == "client_not_linked")
            #expect(try await env.call(.post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"]]).code == "client_not_linked")
        }
    }

    /// An account whose maker was dropped leaves its entries without it; the unlink invitations sends
    /// after it does not name the account there again.
    @Test func theUnlinkAfterADroppedMakerDoesNotNameTheAccountAgain() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, _) = try await env.coachWithClient()
            try await env.publish(UserPasswordChanged(userID: client.id, method: .reset, makerDropped: true), userID: client.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM roster_entries WHERE client_id = '\(client.id)'") == 0 }
            let handled = try await env.count("SELECT count(*) FROM inbox")
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false, rosterEntryID: entry), userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") > handled }
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND stage = 2") == 1)
            #expect(try await env.count("SELECT count(*) FROM roster_entries WHERE client_id = '\(client.id)'") == 0)
        }
    }

    /// Today is the caller's day in their time zone: 26 hours apart between UTC-12 and UTC+14.
    @Test func todayIsTheDayInTheCallersTimeZone() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let east = TrainingTestEnvironment.day(0, in: "Etc/GMT-14")
            let west = TrainingTestEnvironment.day(0, in: "Etc/GMT+12")
            #expect(east != west)
            let ids = try await env.assign(workout, to: entry, by: coach, on: [east, west])
            #expect(try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "Etc/GMT-14", "weight_unit": "kg"]).status == .ok)
            let eastToday = try await env.call(.get, "/v1/training/today", as: client)
            #expect(eastToday.json["from"] as? String == east && eastToday.items.count == 1 && eastToday.json["time_zone"] as? String == "Etc/GMT-14")
            #expect((eastToday.items.first?["scheduled_on"] as? String) == east)
            _ = try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "Etc/GMT+12", "weight_unit": "kg"])
            let westToday = try await env.call(.get, "/v1/training/today", as: client)
            #expect(westToday.json["from"] as? String == west && westToday.items.map { $0["scheduled_on"] as? String } == [west])
            #expect(ids.count == 2)
        }
    }

    /// Adherence over 7 and 30 days: completed 1, partial ½, skipped and missed 0; today's session
    /// not yet done and cancelled ones are not due.
    @Test func adherenceCountsWhatWasDue() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient(sets: 2)
            let offsets = [-10, -4, -3, -2, -1, 0]
            let ids = try await env.assign(workout, to: entry, by: coach, on: offsets.map { TrainingTestEnvironment.day($0) })
            func log(_ id: String, sets: Int) async throws {
                let reply = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: sets))
                #expect(reply.status == .ok, "\(reply.text)")
            }
            try await log(ids[0], sets: 2)  // -10: completed
            try await log(ids[1], sets: 1)  // -4: partial
            // -3: missed
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[3])/skip", as: client).status == .ok)  // -2: skipped
            try await log(ids[4], sets: 2)  // -1: completed
            let progress = try await env.call(.get, "/v1/training/clients/\(entry)", as: coach)
            #expect(progress.status == .ok, "\(progress.text)")
            let week = try #require(progress.json[path: "adherence.last_7_days"] as? [String: Any])
            #expect(week["due"] as? Int == 4 && week["completed"] as? Int == 1 && week["partial"] as? Int == 1 && week["skipped"] as? Int == 1 && week["missed"] as? Int == 1)
            #expect(week["rate"] as? Double == 0.375)
            let month = try #require(progress.json[path: "adherence.last_30_days"] as? [String: Any])
            #expect(month["due"] as? Int == 5 && month["completed"] as? Int == 2 && month["rate"] as? Double == 0.5)
            #expect(progress.items.count == 6 && progress.json["today"] as? String == TrainingTestEnvironment.day(0))
            let logged = try #require(progress.items.first { ($0["id"] as? String)?.lowercased() == ids[1] })
            #expect((logged["logged_sets"] as? [Any])?.count == 1 && (logged["blocks"] as? [[String: Any]])?.first?["sets"] as? [Any] != nil)
            let narrow = try await env.call(.get, "/v1/training/clients/\(entry)?from=\(TrainingTestEnvironment.day(-2))&to=\(TrainingTestEnvironment.day(0))", as: coach)
            #expect(narrow.items.count == 3)
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)?from=yesterday", as: coach).fieldErrors == ["from"])
            // A sign is not a digit: PostgreSQL would refuse the day, so the request is refused first.
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)?from=2030-01-%2B1", as: coach).fieldErrors == ["from"])
            #expect(try await env.call(.get, "/v1/training/sessions?from=2030-%2B1-01", as: client).fieldErrors == ["from"])
            // Today's, unlogged, is not yet due; logged, it counts.
            try await log(ids[5], sets: 2)
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)", as: coach).json[path: "adherence.last_7_days.due"] as? Int == 5)
        }
    }
}
