import Foundation
import HTTPTypes
import Models
import ServiceKit
import Synchronization
import Testing
import TestSupport
@testable import Training

/// A coach's plans for a roster entry, before and after the client accepts, and what the client
/// then sees.
@Suite struct AssignmentTests {
    /// The coach invites, plans three sessions; the client signs up and accepts; their first
    /// `today` and `sessions` show them.
    /// The coach's view of a client holds at most 92 days, every session with its sets.
    @Test func theClientViewsRangeIsBounded() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, _, entry, _) = try await env.coachWithClient()
            let wide = try await env.call(.get, "/v1/training/clients/\(entry)?from=1900-01-01&to=2100-12-31", as: coach)
            #expect(wide.status == .badRequest && wide.code == "validation_failed" && wide.fieldErrors == ["to"], "\(wide.text)")
            let early = try await env.call(.get, "/v1/training/clients/\(entry)?from=2000-01-01", as: coach)
            #expect(early.status == .badRequest && early.fieldErrors == ["from"], "\(early.text)")
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)?from=2030-01-01&to=2030-04-01", as: coach).status == .ok)
        }
    }

    /// The client's token carries the `client` role as soon as the acceptance is recorded, and the
    /// acceptance's event reaches training a moment later: the first `today` and My Workouts wait
    /// for it, so the client sees the plan at once. A client whose link is known, with nothing
    /// planned, is answered at once.
    @Test func theFirstTodayAfterAcceptingWaitsForThePlan() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let entry = try await env.rosterEntry(of: coach)
            let press = try await env.libraryExercise("Pushups")
            let workout = try #require(try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(press)).json["id"] as? String)
            let today = TrainingTestEnvironment.day(0)
            _ = try await env.assign(workout, to: entry, by: coach, on: [today])
            let client = try await env.client()
            for path in ["/v1/training/today", "/v1/training/sessions?from=\(today)"] {
                let read = Task { try await env.call(.get, path, as: client) }
                if path.hasSuffix("today") {
                    try await Task.sleep(for: .milliseconds(300))
                    try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
                }
                let reply = try await read.value
                #expect(reply.status == .ok && reply.items.count == 1, "\(path): \(reply.text)")
            }
            // Linked, nothing planned on that day: no wait. A client no roster names waits the whole
            // wait for its link; the linked client's read, sent after it, is answered first: an
            // order, which a loaded machine cannot turn around.
            let unlinked = try await env.client()
            let path = "/v1/training/sessions?from=\(TrainingTestEnvironment.day(30))"
            let waiting = Task { () -> ContinuousClock.Instant in
                _ = try await env.concurrentReply(.get, path, as: unlinked)
                return ContinuousClock.now
            }
            try await Task.sleep(for: .milliseconds(300))
            let empty = try await env.call(.get, path, as: client)
            let answered = ContinuousClock.now
            #expect(empty.status == .ok && empty.items.isEmpty)
            #expect(answered < (try await waiting.value))
        }
    }

    /// A client switching coaches: the old coach's unlink is here, the new acceptance a moment
    /// behind it. The entry they left names them still, yet their first `today` waits for the new
    /// plan rather than answering that nothing is planned.
    @Test func aClientSwitchingCoachesSeesTheNewPlanFirst() async throws {
        try await TrainingTestEnvironment.run { env in
            let (former, client, formerEntry, _) = try await env.coachWithClient()
            let coach = try await env.coach()
            let entry = try await env.rosterEntry(of: coach)
            let workout = try #require(
                try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Pushups"))).json["id"] as? String)
            _ = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])
            try await env.publish(
                ClientUnlinked(coachID: former.id, clientID: client.id, reason: .switched, hasOtherCoach: true, rosterEntryID: formerEntry), userID: client.id)
            try await waitUntil(.seconds(10)) {
                try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(formerEntry)' AND stage = \(RosterStore.Stage.left.rawValue)") == 1
            }
            let read = Task { try await env.call(.get, "/v1/training/today", as: client) }
            try await Task.sleep(for: .milliseconds(300))
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
            let reply = try await read.value
            #expect(reply.status == .ok && reply.items.count == 1 && reply.items.first?["coach_id"] as? String == coach.id.uuidString.lowercased(), "\(reply.text)")
        }
    }

    /// A client switching coaches with a plan from the former one: their list is not empty, so only
    /// the coach they name (`coach_id`) tells the read to wait for the new plan, which it shows
    /// without the former coach's sessions, however far behind both events are.
    @Test func aClientNamingTheirNewCoachWaitsForTheirPlan() async throws {
        try await TrainingTestEnvironment.run { env in
            let (former, client, formerEntry, formerWorkout) = try await env.coachWithClient()
            _ = try await env.assign(formerWorkout, to: formerEntry, by: former, on: [TrainingTestEnvironment.day(0), TrainingTestEnvironment.day(1)])
            let coach = try await env.coach()
            let entry = try await env.rosterEntry(of: coach)
            let workout = try #require(
                try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Pushups"))).json["id"] as? String)
            let planned = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0), TrainingTestEnvironment.day(1)])
            let coachID = coach.id.uuidString.lowercased()

            #expect(try await env.call(.get, "/v1/training/today?coach_id=nope", as: client).code == "validation_failed")
            #expect(try await env.call(.get, "/v1/training/sessions?coach_id=12", as: client).status == .badRequest)
            #expect(try await env.call(.get, "/v1/training/today?coach_id=\(coachID)", as: coach).status == .forbidden)

            let today = Task { try await env.call(.get, "/v1/training/today?coach_id=\(coachID)", as: client) }
            let week = Task { try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(0))&coach_id=\(coachID.uppercased())", as: client) }
            try await Task.sleep(for: .milliseconds(300))
            try await env.publish(
                ClientUnlinked(coachID: former.id, clientID: client.id, reason: .switched, hasOtherCoach: true, rosterEntryID: formerEntry), userID: client.id)
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
            let todayReply = try await today.value
            #expect(todayReply.status == .ok && todayReply.ids == [planned[0]], "\(todayReply.text)")
            let weekReply = try await week.value
            #expect(weekReply.status == .ok && weekReply.ids == planned, "\(weekReply.text)")
            // Once the plan is here, naming the coach costs one lookup; naming one who does not coach
            // them waits out and answers the list as it is.
            #expect(try await env.call(.get, "/v1/training/today?coach_id=\(coachID)", as: client).ids == [planned[0]])
            #expect(try await env.call(.get, "/v1/training/today?coach_id=\(former.id.uuidString.lowercased())", as: client).ids == [planned[0]])
        }
    }

    /// The acceptance may reach training before the former coach's unlink: until the unlink is
    /// heard too, both plans are the client's, and the read naming the new coach, or the entry the
    /// client accepted, waits for it.
    @Test(arguments: [false, true])
    func aClientNamingTheirNewCoachWaitsForTheFormerLinksEnd(namingTheEntry: Bool) async throws {
        try await TrainingTestEnvironment.run { env in
            let (former, client, formerEntry, formerWorkout) = try await env.coachWithClient()
            _ = try await env.assign(formerWorkout, to: formerEntry, by: former, on: [TrainingTestEnvironment.day(0)])
            let coach = try await env.coach()
            let entry = try await env.rosterEntry(of: coach)
            let workout = try #require(
                try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Pushups"))).json["id"] as? String)
            let planned = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])
            let coachID = coach.id.uuidString.lowercased()
            try await env.accept(entry, coach: coach, client: client)
            #expect(try await env.call(.get, "/v1/training/today", as: client).ids.count == 2)

            let named = namingTheEntry ? "roster_entry_id=\(entry)" : "coach_id=\(coachID)"
            let answered = Flag()
            let today = Task {
                defer { answered.raise() }
                return try await env.call(.get, "/v1/training/today?\(named)", as: client)
            }
            // Given time to look (the wait is `rosterWait`), the read is still waiting for the former link's end.
            try await Task.sleep(for: .milliseconds(100))
            #expect(!answered.isRaised, "answered before the former coach's unlink was heard")
            try await env.publish(
                ClientUnlinked(coachID: former.id, clientID: client.id, reason: .switched, hasOtherCoach: true, rosterEntryID: formerEntry), userID: client.id)
            let reply = try await today.value
            #expect(reply.status == .ok && reply.ids == [planned[0]], "\(reply.text)")
        }
    }

    /// A client accepting a second invitation of the coach they have: naming the coach cannot tell
    /// the two entries apart (the first still names them until the acceptance is heard), naming
    /// the entry invitations' answer gives can, and the read waits for its plan.
    @Test func aClientNamingTheEntryTheyAcceptedWaitsForItsPlan() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, first, workout) = try await env.coachWithClient()
            let former = try await env.assign(workout, to: first, by: coach, on: [TrainingTestEnvironment.day(0)])
            let second = try await env.rosterEntry(of: coach)
            let planned = try await env.assign(workout, to: second, by: coach, on: [TrainingTestEnvironment.day(0), TrainingTestEnvironment.day(1)])

            #expect(try await env.call(.get, "/v1/training/today?roster_entry_id=nope", as: client).code == "validation_failed")
            let both = try await env.call(.get, "/v1/training/sessions?roster_entry_id=\(second)&coach_id=\(coach.id)", as: client)
            #expect(both.code == "validation_failed" && both.text.contains("roster_entry_id"), "\(both.text)")
            #expect(try await env.call(.get, "/v1/training/today?roster_entry_id=\(second)", as: coach).status == .forbidden)
            #expect(try await env.call(.get, "/v1/training/today?coach_id=\(coach.id)", as: client).ids == former)

            let answered = Flag()
            let asked = ContinuousClock.now
            let today = Task {
                defer { answered.raise() }
                return try await env.call(.get, "/v1/training/today?roster_entry_id=\(second)", as: client)
            }
            let week = Task { try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(0))&roster_entry_id=\(second.uuidString)", as: client) }
            try await Task.sleep(for: .milliseconds(100))
            #expect(!answered.isRaised, "answered before the acceptance was heard")
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: second), userID: client.id)
            let todayReply = try await today.value
            #expect(todayReply.status == .ok && todayReply.ids == [planned[0]], "\(todayReply.text)")
            // It ended when the acceptance was heard: a wait that never ends early gives up after `rosterWait`.
            #expect(ContinuousClock.now - asked < TrainingTestEnvironment.rosterWait)
            let weekReply = try await week.value
            #expect(weekReply.status == .ok && weekReply.ids == planned, "\(weekReply.text)")
        }
    }

    /// An entry that is not, and cannot become, the caller's (made up, another client's, or one
    /// they left) is not waited for: the list is read at once. A read that waits takes the whole
    /// `rosterWait` before it gives up.
    @Test func namingAnEntryThatCannotBeTheCallersIsReadAtOnce() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, _) = try await env.coachWithClient()
            let stranger = try await env.user()
            let left = try await env.rosterEntry(of: coach)
            try await env.accept(left, coach: coach, client: stranger)
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: stranger.id, reason: .left, hasOtherCoach: false, rosterEntryID: left), userID: stranger.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM roster_entries WHERE id = '\(left)' AND stage = 2") == 1 }
            for (caller, named) in [(stranger, UUID()), (stranger, entry), (stranger, left), (client, left)] {
                let asked = ContinuousClock.now
                let reply = try await env.call(.get, "/v1/training/today?roster_entry_id=\(named)", as: caller)
                #expect(reply.status == .ok)
                #expect(ContinuousClock.now - asked < TrainingTestEnvironment.rosterWait, "waited for \(named)")
            }
            // The caller's own entry, here already: one lookup, no wait.
            let asked = ContinuousClock.now
            #expect(try await env.call(.get, "/v1/training/today?roster_entry_id=\(entry)", as: client).status == .ok)
            #expect(ContinuousClock.now - asked < TrainingTestEnvironment.rosterWait, "waited for the caller's own entry")
        }
    }

    /// Any account may name any coach: one with no roster entry that is, or may become, the
    /// caller's (a made-up id, a coach whose entries are all taken) is not waited for. A read that
    /// waits takes the whole `rosterWait` before it gives up.
    @Test func namingACoachWithNothingForTheCallerIsReadAtOnce() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, _, _) = try await env.coachWithClient()
            let stranger = try await env.user()
            for (caller, named) in [(stranger, UUID()), (stranger, coach.id), (client, UUID())] {
                let asked = ContinuousClock.now
                let reply = try await env.call(.get, "/v1/training/today?coach_id=\(named.uuidString.lowercased())", as: caller)
                #expect(reply.status == .ok)
                #expect(ContinuousClock.now - asked < TrainingTestEnvironment.rosterWait, "waited for \(named)")
            }
        }
    }

    /// A first-time client whose token was signed before they accepted (no `client` role yet) and
    /// who names the coach waits for the acceptance as well: My Workouts shows the plan at once.
    @Test func aNewClientsTokenWithoutTheRoleWaitsForTheNamedCoach() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, _, entry, workout) = try await env.coachWithInvitedClient()
            let planned = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])
            let newcomer = try await env.user()
            let answered = Flag()
            let today = Task {
                defer { answered.raise() }
                return try await env.call(.get, "/v1/training/sessions?coach_id=\(coach.id.uuidString.lowercased())", as: newcomer)
            }
            try await Task.sleep(for: .milliseconds(100))
            #expect(!answered.isRaised, "answered before the acceptance was heard")
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: newcomer.id, rosterEntryID: entry), userID: newcomer.id)
            let reply = try await today.value
            #expect(reply.status == .ok && reply.ids == planned, "\(reply.text)")
        }
    }

    @Test func theFirstWeekPlannedBeforeTheClientAcceptsIsTheirsOnAcceptance() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let entry = try await env.rosterEntry(of: coach)
            let press = try await env.libraryExercise("Pushups")
            let workout = try #require(try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(press, name: "Week one")).json["id"] as? String)
            let days = [TrainingTestEnvironment.day(0), TrainingTestEnvironment.day(2), TrainingTestEnvironment.day(4)]
            let planned = try await env.call(.post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": workout, "dates": Array(days.reversed())])
            #expect(planned.status == .created, "\(planned.text)")
            #expect(planned.items.map { $0["scheduled_on"] as? String } == days)
            #expect(planned.items.allSatisfy { $0["client_id"] is NSNull && $0["status"] as? String == "scheduled" && $0["name"] as? String == "Week one" })
            #expect(planned.items.first?[path: "blocks"] is [Any])
            #expect((planned.items.first?["blocks"] as? [[String: Any]])?.first?["exercise_name"] as? String == "Pushups")
            // Nobody to tell yet.
            #expect(try await env.count("SELECT count(*) FROM outbox WHERE type = 'workout.assigned'") == 0)
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE client_id IS NOT NULL") == 0)
            let progress = try await env.call(.get, "/v1/training/clients/\(entry)", as: coach)
            #expect(progress.status == .ok && progress.json[path: "client.status"] as? String == "pending" && progress.items.count == 3, "\(progress.text)")

            // The client signs up: nothing yet. Accepts: their first `today` shows today's session.
            let client = try await env.user()
            #expect(try await env.call(.get, "/v1/training/today", as: client).items.isEmpty)
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.call(.get, "/v1/training/today", as: client).items.count == 1 }
            let today = try await env.call(.get, "/v1/training/today", as: client)
            #expect(today.json["from"] as? String == days[0] && today.json["time_zone"] as? String == "UTC")
            #expect((today.items.first?["client_id"] as? String)?.lowercased() == client.path)
            let week = try await env.call(.get, "/v1/training/sessions?from=\(days[0])&to=\(TrainingTestEnvironment.day(6))", as: client)
            #expect(week.status == .ok && week.ids == planned.ids, "\(week.text)")
            // Without a range: the week from today.
            #expect(try await env.call(.get, "/v1/training/sessions", as: client).ids == planned.ids)
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)", as: coach).json[path: "client.status"] as? String == "accepted")

            // A session planned now is the client's at once, and they hear of it.
            let more = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])
            try await waitUntil(.seconds(10)) { try await env.live("workout.assigned", to: client).contains { $0.lowercased().contains(more[0]) } }
            #expect(try await env.live("workout.assigned", to: client).count == 1)
            // The acceptance delivered twice changes nothing.
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM inbox") >= 3 }
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE client_id = '\(client.id)'") == 4)
        }
    }

    /// Dates, or weekdays for some weeks; each field named when wrong; a workout or client that is
    /// not the coach's is 404; after the client left, 409.
    @Test func assignmentsAreCheckedAndEndWithTheLink() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let path = "/v1/training/clients/\(entry)/assignments"
            // Mondays and Thursdays for two weeks from a Monday.
            let weekly = try await env.call(.post, path, as: coach, json: ["workout_id": workout, "start": "2030-01-07", "days_of_week": [1, 4], "weeks": 2])
            #expect(weekly.status == .created && weekly.items.map { $0["scheduled_on"] as? String } == ["2030-01-07", "2030-01-10", "2030-01-14", "2030-01-17"], "\(weekly.text)")
            for (body, field) in [
                (["workout_id": workout, "dates": ["2030-02-30"]], "dates[0]"),
                (["workout_id": workout, "dates": ["2030-01-01", "2030-+1-01"]], "dates[1]"),
                (["workout_id": workout, "dates": []], "dates"),
                (["workout_id": workout], "dates"),
                (["workout_id": workout, "dates": ["2030-01-01"], "weeks": 2], "dates"),
                (["workout_id": workout, "start": "2030-01-07", "days_of_week": [0, 8], "weeks": 2], "days_of_week"),
                (["workout_id": workout, "start": "2030-01-07", "days_of_week": [1], "weeks": 53], "weeks"),
                (["workout_id": workout, "start": "2030-01-07", "days_of_week": [1], "weeks": 1.5], "weeks"),
                (["workout_id": workout, "start": "2030-01-07", "days_of_week": [1, 4.5], "weeks": 1], "days_of_week[1]"),
                (["workout_id": workout, "start": "2030-01-07", "days_of_week": [1, 2, 3, 4, 5, 6, 7], "weeks": 52], "weeks"),
                (["workout_id": workout, "start": "9999-12-31", "days_of_week": [1, 2, 3, 4, 5, 6, 7], "weeks": 1], "weeks"),
            ] as [([String: Any], String)] {
                let reply = try await env.call(.post, path, as: coach, json: body)
                #expect(reply.status == .badRequest && reply.code == "validation_failed" && reply.fieldErrors.contains(field), "\(body): \(reply.text)")
            }
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": "nope", "dates": ["2030-01-01"]]).status == .badRequest)
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": workout, "dates": "2030-01-01"]).status == .badRequest)
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"], "extra": 1]).status == .badRequest)
            #expect(try await env.call(.post, path, as: coach, raw: .init(string: "{\"workout_id\":"), headers: [.contentType: "application/json"]).status == .badRequest)
            #expect(try await env.call(.post, path, json: ["workout_id": workout, "dates": ["2030-01-01"]]).status == .unauthorized)
            let huge = String(repeating: "x", count: 2 << 20)
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": workout, "dates": [huge]]).status.code == 413)
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": UUID().uuidString, "dates": ["2030-01-01"]]).code == "workout_not_found")

            // Another coach: neither the entry nor the workout is theirs.
            let other = try await env.coach()
            let otherWorkout = try #require(
                try await env.call(.post, "/v1/workouts", as: other, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Pushups"))).json["id"] as? String)
            // Answered as a made-up id is, after the whole wait for an entry still on its way: an
            // answer at once would tell that the id is some coach's.
            let asked = ContinuousClock.now
            #expect(try await env.call(.post, path, as: other, json: ["workout_id": otherWorkout, "dates": ["2030-01-01"]]).code == "client_not_found")
            #expect(ContinuousClock.now - asked >= TrainingTestEnvironment.rosterWait)
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": otherWorkout, "dates": ["2030-01-01"]]).code == "workout_not_found")
            #expect(try await env.call(.post, "/v1/training/clients/\(UUID())/assignments", as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"]]).code == "client_not_found")
            #expect(try await env.call(.post, "/v1/training/clients/not-an-id/assignments", as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"]]).status == .notFound)

            // Logged, then the client leaves: what was not started is cancelled, yesterday's and a
            // skipped one too; the log stays the client's, and the former coach no longer reads it
            // nor hears of it. A workout done before the leaving, logged after it (the app was
            // offline), is taken, and is the client's alone; one done after it is not.
            let today = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])
            let yesterday = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(-1)])
            let skipped = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(-2)])
            #expect(try await env.call(.post, "/v1/training/sessions/\(skipped[0])/skip", as: client).status == .ok)
            #expect(try await env.call(.post, "/v1/training/sessions/\(today[0])/log", as: client, json: TrainingTestEnvironment.log(sets: 3)).status == .ok)
            #expect(try await env.call(.get, "/v1/training/sessions/\(today[0])", as: coach).status == .ok)
            try await waitUntil(.seconds(10)) { try await env.live("workout.logged", to: coach).count == 1 }
            let beforeLeaving = TrainingTestEnvironment.moment(Date().addingTimeInterval(-60))
            try await env.publish(ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false, rosterEntryID: entry), userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM sessions WHERE status = 'cancelled'") == 6 }
            var afterLeaving = TrainingTestEnvironment.log(sets: 3)
            // Past the cancellation, though `performed_at` is written in whole seconds.
            afterLeaving["performed_at"] = TrainingTestEnvironment.moment(Date().addingTimeInterval(2))
            #expect(try await env.call(.post, "/v1/training/sessions/\(skipped[0])/log", as: client, json: afterLeaving).code == "session_cancelled")
            #expect(try await env.call(.post, "/v1/training/sessions/\(yesterday[0])/log", as: client, json: afterLeaving).code == "session_cancelled")
            // A log that cannot be taken names the cancellation first, as one that could is told.
            afterLeaving["sets"] = [["block": 1, "set": 0, "done": true]]
            #expect(try await env.call(.post, "/v1/training/sessions/\(yesterday[0])/log", as: client, json: afterLeaving).code == "session_cancelled")
            var offline = TrainingTestEnvironment.log(sets: 3)
            offline["performed_at"] = beforeLeaving
            offline["sets"] = [["block": 1, "set": 0, "done": true]]
            #expect(try await env.call(.post, "/v1/training/sessions/\(yesterday[0])/log", as: client, json: offline).code == "validation_failed")
            offline = TrainingTestEnvironment.log(sets: 3)
            offline["performed_at"] = beforeLeaving
            let late = try await env.call(.post, "/v1/training/sessions/\(yesterday[0])/log", as: client, json: offline)
            #expect(late.status == .ok && late.json["status"] as? String == "completed", "\(late.text)")
            // A correction is held to the cancellation as the first log was.
            afterLeaving = TrainingTestEnvironment.log(sets: 2)
            afterLeaving["performed_at"] = TrainingTestEnvironment.moment(Date().addingTimeInterval(2))
            #expect(try await env.call(.post, "/v1/training/sessions/\(yesterday[0])/log", as: client, json: afterLeaving).code == "session_cancelled")
            offline["sets"] = (offline["sets"] as? [[String: Any]])?.map { $0.merging(["reps": 6]) { $1 } }
            #expect(try await env.call(.post, "/v1/training/sessions/\(yesterday[0])/log", as: client, json: offline).json["status"] as? String == "completed")
            #expect(try await env.call(.get, "/v1/training/sessions/\(yesterday[0])", as: coach).code == "session_not_found")
            let corrected = try await env.call(.post, "/v1/training/sessions/\(today[0])/log", as: client, json: TrainingTestEnvironment.log(sets: 2))
            #expect(corrected.status == .ok && corrected.json["status"] as? String == "partial", "\(corrected.text)")
            // A line break as Windows writes it is a line break.
            let note = try await env.call(.post, "/v1/training/sessions/\(today[0])/comments", as: client, json: ["text": "on my own\r\nnow"])
            #expect(note.status == .created && note.json["text"] as? String == "on my own\r\nnow", "\(note.text)")
            #expect(try await env.call(.post, "/v1/training/sessions/\(today[0])/comments", as: client, json: ["text": "bell\u{7}"]).code == "validation_failed")
            #expect(try await env.call(.get, "/v1/training/sessions/\(today[0])", as: coach).code == "session_not_found")
            #expect(try await env.call(.get, "/v1/training/sessions/\(today[0])/comments", as: coach).code == "session_not_found")
            #expect(try await env.call(.post, "/v1/training/sessions/\(today[0])/comments", as: coach, json: ["text": "come back"]).code == "session_not_found")
            #expect(try await env.call(.get, "/v1/training/clients/\(entry)", as: coach).code == "client_not_linked")
            // Events are written with the change they announce: the outbox, relayed or not, holds them all.
            #expect(try await env.written("workout.logged") == 1, "the logs after leaving are not announced to the former coach")
            #expect(try await env.written("workout.commented") == 0)
            #expect(try await env.call(.post, "/v1/training/sessions/\(today[0])/comments", as: client, json: ["text": "over\rwritten"]).code == "validation_failed")
            // A session of a client who left stays out of a push, even one still scheduled (left from
            // before the plan ended with the link).
            try await env.execute("UPDATE sessions SET status = 'scheduled' WHERE id = '\(skipped[0])'")
            let pushed = try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach)
            #expect(pushed.status == .ok && pushed.json["updated"] as? Int == 0, "\(pushed.text)")
            #expect(try await env.call(.get, "/v1/training/sessions/\(today[0])", as: client).json["status"] as? String == "partial")
            #expect(Set(try await env.call(.get, "/v1/training/history", as: client).ids) == Set(today + yesterday))
            #expect(try await env.call(.get, "/v1/training/sessions?from=2030-01-07&to=2030-01-20", as: client).items.isEmpty)
            let refused = try await env.call(.post, path, as: coach, json: ["workout_id": workout, "dates": ["2030-01-01"]])
            #expect(refused.status == .conflict && refused.code == "client_not_linked")
            afterLeaving = TrainingTestEnvironment.log(sets: 3)
            afterLeaving["performed_at"] = TrainingTestEnvironment.moment(Date().addingTimeInterval(2))
            #expect(try await env.call(.post, "/v1/training/sessions/\(weekly.ids[0])/log", as: client, json: afterLeaving).code == "session_cancelled")
        }
    }

    /// Push copies the workout as it is now onto the sessions not started; a logged or skipped one
    /// keeps its copy. The coach unschedules only a session not started.
    /// An assignment for a roster entry not here yet waits for its event without holding a database
    /// connection: coaches posting for made-up ids leave the pool to everyone else.
    @Test func awaitingARosterEntryHoldsNoConnection() async throws {
        try await TrainingTestEnvironment.run(["DATABASE_POOL_SIZE": "2"]) { env in
            let coach = try await env.coach()
            // Someone without the client role: a client's first read would wait for its link.
            let client = try await env.user()
            let waiting = (0..<3).map { _ in
                Task { () -> ContinuousClock.Instant in
                    let body: [String: Any] = ["workout_id": UUID().uuidString, "dates": [TrainingTestEnvironment.day(1)]]
                    _ = try await env.concurrentReply(.post, "/v1/training/clients/\(UUID())/assignments", as: coach, json: body)
                    return ContinuousClock.now
                }
            }
            // While the three wait out their entries, a client's read is answered.
            try await Task.sleep(for: .milliseconds(300))
            let read = try await env.concurrentReply(.get, "/v1/training/today", as: client)
            let readAnswered = ContinuousClock.now
            #expect(read.status == 200)
            for task in waiting {
                // Answered after the read: an order, which a loaded machine cannot turn around.
                #expect(readAnswered < (try await task.value))
            }
        }
    }

    @Test func pushNeverTouchesAStartedSession() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: (0..<4).map { TrainingTestEnvironment.day($0) })
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[0])/log", as: client, json: TrainingTestEnvironment.log(sets: 2)).json["status"] as? String == "partial")
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[1])/skip", as: client, json: ["reason": "Sick"]).json["status"] as? String == "skipped")

            let current = try await env.call(.get, "/v1/workouts/\(workout)", as: coach)
            let plank = try await env.libraryExercise("Plank")
            var changed = TrainingTestEnvironment.workout(plank, name: "Core day", sets: 1)
            changed["notes"] = "New plan"
            let replaced = try await env.call(.put, "/v1/workouts/\(workout)", as: coach, json: changed, headers: [.ifMatch: try #require(current.headers[.eTag])])
            #expect(replaced.status == .ok, "\(replaced.text)")
            // Editing the template alone changes no session.
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[2])", as: client).json["name"] as? String == "Push day")

            let pushed = try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach)
            #expect(pushed.status == .ok && pushed.json["updated"] as? Int == 2, "\(pushed.text)")
            #expect(Set((pushed.json["session_ids"] as? [String] ?? []).map { $0.lowercased() }) == Set(ids[2...]))
            for id in ids[2...] {
                let session = try await env.call(.get, "/v1/training/sessions/\(id)", as: client)
                #expect(session.json["name"] as? String == "Core day" && session.json["notes"] as? String == "New plan")
                #expect(session.json[path: "blocks.0.exercise_name"] as? String == "Plank")
            }
            for id in ids[..<2] {
                let session = try await env.call(.get, "/v1/training/sessions/\(id)", as: client)
                #expect(session.json["name"] as? String == "Push day" && session.json[path: "blocks.0.exercise_name"] as? String == "Pushups")
                #expect(session.json[path: "blocks.0.sets.2.reps"] as? Int == 8)
            }
            // Pushed again with nothing changed, and onto a copy made after the edit: no copy changes
            // version or is marked pushed, so the new one is logged without naming a version.
            let tag = try #require(try await env.call(.get, "/v1/training/sessions/\(ids[2])", as: client).headers[.eTag])
            let fresh = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(5)])
            let again = try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach)
            #expect(again.status == .ok && again.json["updated"] as? Int == 0, "\(again.text)")
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[2])", as: client).headers[.eTag] == tag)
            let logged = try await env.call(.post, "/v1/training/sessions/\(fresh[0])/log", as: client, json: TrainingTestEnvironment.log(sets: 1))
            #expect(logged.status == .ok, "\(logged.text)")

            // The logged session's sets still match the blocks they were logged against.
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: coach).json[path: "logged_sets.0.exercise_name"] as? String == "Pushups")

            #expect(try await env.call(.delete, "/v1/training/sessions/\(ids[0])", as: coach).code == "session_started")
            #expect(try await env.call(.delete, "/v1/training/sessions/\(ids[1])", as: coach).code == "session_started")
            #expect(try await env.call(.delete, "/v1/training/sessions/\(ids[3])", as: coach).status == .noContent)
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[3])", as: client).code == "session_not_found")
            #expect(try await env.call(.post, "/v1/workouts/\(UUID())/push", as: coach).code == "workout_not_found")
        }
    }

    /// A client's day holds at most ten of one coach's sessions, cancelled ones aside: an
    /// assignment that would pass it writes nothing and names the full days, and assignments sent
    /// at once for the same day take its last places one at a time.
    @Test func aClientsDayHoldsAtMostTenOfTheCoachsSessions() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let path = "/v1/training/clients/\(entry)/assignments"
            var full: [String] = []
            for _ in 0..<SessionStore.maxSessionsPerDay { full += try await env.assign(workout, to: entry, by: coach, on: ["2031-03-03"]) }
            let refused = try await env.call(.post, path, as: coach, json: ["workout_id": workout, "dates": ["2031-03-02", "2031-03-03"]])
            #expect(refused.status == .conflict && refused.code == "day_full", "\(refused.text)")
            #expect((refused.json["detail"] as? String)?.contains("2031-03-03") == true && (refused.json["detail"] as? String)?.contains("2031-03-02") == false, "\(refused.text)")
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE scheduled_on = '2031-03-02'") == 0)
            // Another coach of the same client plans their own sessions on that day.
            let other = try await env.coach()
            let otherEntry = try await env.rosterEntry(of: other)
            try await env.accept(otherEntry, coach: other, client: client)
            let otherWorkout = try #require(
                try await env.call(.post, "/v1/workouts", as: other, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Pushups"))).json["id"] as? String)
            _ = try await env.assign(otherWorkout, to: otherEntry, by: other, on: ["2031-03-03"])
            // A session unscheduled frees its place.
            #expect(try await env.call(.delete, "/v1/training/sessions/\(full[0])", as: coach).status == .noContent)
            #expect(try await env.assign(workout, to: entry, by: coach, on: ["2031-03-03"]).count == 1)
            #expect(try await env.call(.post, path, as: coach, json: ["workout_id": workout, "dates": ["2031-03-03"]]).code == "day_full")
            #expect(try await env.call(.get, "/v1/training/sessions?from=2031-03-03&to=2031-03-03", as: client).items.count == SessionStore.maxSessionsPerDay + 1)

            // Twelve at once for a new day: ten are scheduled, two refused, none past the limit.
            let racing = (0..<12).map { _ in
                Task { try await env.concurrentReply(.post, path, as: coach, json: ["workout_id": workout, "dates": ["2031-03-10"]]) }
            }
            var statuses: [Int] = []
            for task in racing { statuses.append(try await task.value.status) }
            #expect(statuses.filter { $0 == 201 }.count == SessionStore.maxSessionsPerDay && statuses.filter { $0 == 409 }.count == 2, "\(statuses)")
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE scheduled_on = '2031-03-10'") == SessionStore.maxSessionsPerDay)
        }
    }

    /// A push with `If-Match` copies the workout only if it is still the version the coach's app
    /// showed; without one, the workout as it is now.
    @Test func aPushWithIfMatchCopiesOnlyTheVersionShown() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])
            let shown = try #require(try await env.call(.get, "/v1/workouts/\(workout)", as: coach).headers[.eTag])
            // Another device edits the workout after the app read it.
            let edited = try await env.call(.put, "/v1/workouts/\(workout)", as: coach, json: TrainingTestEnvironment.workout(try await env.libraryExercise("Plank"), name: "Core day"))
            #expect(edited.status == .ok, "\(edited.text)")
            let stale = try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach, headers: [.ifMatch: shown])
            #expect(stale.status == .preconditionFailed && stale.code == "precondition_failed" && stale.headers[.eTag] == edited.headers[.eTag], "\(stale.text)")
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: client).json["name"] as? String == "Push day")
            let current = try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach, headers: [.ifMatch: try #require(edited.headers[.eTag])])
            #expect(current.status == .ok && current.json["updated"] as? Int == 1, "\(current.text)")
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: client).json["name"] as? String == "Core day")
            #expect(try await env.call(.post, "/v1/workouts/\(UUID())/push", as: coach, headers: [.ifMatch: shown]).code == "workout_not_found")
        }
    }

    /// A push holds the workout it copies: a deletion in flight is waited for, and then the push
    /// finds no workout, rather than answering `200` for a workout already gone.
    @Test func aPushWaitsForADeletionInFlight() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, _, entry, workout) = try await env.coachWithClient()
            _ = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])
            let (started, starting) = AsyncStream<Task<APIReply, any Error>>.makeStream()
            try await env.inOpenTransaction(
                ["DELETE FROM workouts WHERE id = '\(workout)'"],
                while: {
                    starting.yield(Task { try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach) })
                    starting.finish()
                    try await env.awaitLockWait()
                })
            for await task in started {
                let pushed = try await task.value
                #expect(pushed.status == .notFound && pushed.code == "workout_not_found", "\(pushed.text)")
            }
        }
    }
}

/// Whether a task has got as far as it says, read from the test's while the task runs.
private final class Flag: Sendable {
    private let raised = Atomic(false)
    func raise() { raised.store(true, ordering: .relaxed) }
    var isRaised: Bool { raised.load(ordering: .relaxed) }
}
