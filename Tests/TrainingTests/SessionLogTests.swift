import Foundation
import HTTPTypes
import Models
import PostgresNIO
import ServiceKit
import ServiceKitEvents
import Testing
import TestSupport
@testable import Training

/// The client's side: logging (once, however often the app retries), skipping, weights in the
/// unit the client chose, History and records, comments, and the settings.
@Suite struct SessionLogTests {
    /// An app that logs offline retries: with its `Idempotency-Key` the retry is answered as the
    /// first was, and many at once still leave one log; a retry without a key replaces the log. The
    /// coach hears of the log once, and again only when a log changes it.
    @Test func offlineRetriesLogOnce() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let body = TrainingTestEnvironment.log(sets: 3)
            let path = "/v1/training/sessions/\(id)/log"
            let first = try await env.call(.post, path, as: client, json: body, headers: [HTTPField.Name("Idempotency-Key")!: "log-1"])
            #expect(first.status == .ok && first.json["status"] as? String == "completed", "\(first.text)")
            let again = try await env.call(.post, path, as: client, json: body, headers: [HTTPField.Name("Idempotency-Key")!: "log-1"])
            #expect(again.status == .ok && again.headers[HTTPField.Name("Idempotent-Replayed")!] == "true")
            // Eight at once with one key.
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await env.concurrentReply(.post, path, as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [("Idempotency-Key", "log-2")]).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses)")
            #expect(try await env.count("SELECT count(*) FROM session_sets WHERE session_id = '\(id)'") == 3)
            // Without a key, the same log again: answered, and nothing new for the coach. An event is
            // written by the statement that writes its log: the outbox, relayed or not, holds them all.
            let retried = try await env.call(.post, path, as: client, json: body)
            #expect(retried.status == .ok && retried.json["status"] as? String == "completed")
            #expect(try await env.written("workout.logged") == 1)
            // Without a key, another log: the log is replaced, never doubled, and the coach hears of it.
            let fewer = try await env.call(.post, path, as: client, json: TrainingTestEnvironment.log(sets: 1))
            #expect(fewer.json["status"] as? String == "partial" && (fewer.json["logged_sets"] as? [Any])?.count == 1)
            #expect(try await env.count("SELECT count(*) FROM session_sets WHERE session_id = '\(id)'") == 1)
            #expect(try await env.written("workout.logged") == 2)
            // Only a set changed (its weight): news too.
            let heavier = try await env.call(.post, path, as: client, json: TrainingTestEnvironment.log(sets: 1, weight: ["weight_kg": 62.5]))
            #expect(heavier.status == .ok)
            #expect(try await env.written("workout.logged") == 3)
            // And the coach hears of each.
            try await waitUntil(.seconds(10)) { try await env.live("workout.logged", to: coach).count == 3 }
            // Each names the session's coach and the status its log left, which the log's statement wrote in.
            let envelopes = try await env.live("workout.logged", to: coach)
            let heard = try envelopes.map { try EventEnvelope(json: $0).decode(WorkoutLogged.self) }
            // Written as every envelope is (compact), the template's coach nowhere.
            #expect(envelopes.allSatisfy { !$0.contains("\": ") && !$0.contains(SessionStore.coachToBeRead.uuidString.lowercased()) }, "\(envelopes)")
            #expect(heard.map(\.status) == ["completed", "partial", "partial"], "\(heard)")
            #expect(heard.allSatisfy { $0.coachID == coach.id && $0.clientID == client.id && $0.sessionID == UUID(uuidString: id) }, "\(heard)")
            #expect(try await env.call(.post, "/v1/training/sessions/\(id)/skip", as: client).code == "session_logged")
        }
    }

    /// A log is one statement that writes only the session as it read it: another write of the
    /// session that commits between the statement's read and its lock leaves it writing nothing, no
    /// event either (the route then runs it again holding the session). The statement keeps one plan.
    @Test func aLogWritesOnlyTheSessionAsItReadIt() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let session = try #require(UUID(uuidString: id))
            let outbox = EventOutbox(producer: "training")
            let store = SessionStore()
            @Sendable func log(sets: Int, reps: Int = 8, on connection: PostgresConnection) async throws -> SessionStore.LogOutcome {
                let json = try JSONSerialization.data(withJSONObject: TrainingTestEnvironment.log(sets: sets, reps: reps))
                let draft = try LogDraft(try JSONDecoder().decode(LogDraft.Body.self, from: json))
                let event = try outbox.entry(
                    WorkoutLogged(sessionID: session, coachID: SessionStore.coachToBeRead, clientID: client.id, status: "partial"), userID: client.id)
                return try await store.log(
                    draft, session: session, client: client.id, ifMatch: nil, namesAVersion: false, event: event.envelope, on: connection, logger: TestEnvironment.logger)
            }
            #expect(try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3)).status == .ok)
            let events = try await env.written("workout.logged")

            // A push or another log, held open while a log's statement runs: the statement reads the
            // session before it commits and waits for its lock.
            let config = env.database.config(for: env.serviceName)
            let late = try await withClient(config) { holder in
                try await holder.withConnection { held in
                    _ = try await held.query("BEGIN", logger: TestEnvironment.logger).collect()
                    _ = try await held.query("UPDATE sessions SET version = version + 1 WHERE id = \(session)", logger: TestEnvironment.logger).collect()
                    let waiting = Task { try await withClient(config) { other in try await other.withConnection { try await log(sets: 1, reps: 5, on: $0) } } }
                    try await env.awaitLockWait()
                    _ = try await held.query("COMMIT", logger: TestEnvironment.logger).collect()
                    return try await waiting.value
                }
            }
            guard case .changed = late else {
                Issue.record("a log read before another write of its session was written after it: \(late)")
                return
            }
            #expect(try await env.count("SELECT count(*) FROM session_sets WHERE session_id = '\(session)' AND reps = 8") == 3, "a refused log's set was written")
            #expect(try await env.count("SELECT count(*) FROM session_sets WHERE session_id = '\(session)'") == 3)
            #expect(try await env.written("workout.logged") == events)

            let plans = try await env.plans(of: SessionStore.LogQuery.name) { connection in
                var version = try await env.count("SELECT version::int8 FROM sessions WHERE id = '\(session)'")
                for n in 0..<10 {
                    guard case .logged(let now, let body, let eventWritten) = try await log(sets: n % 3 + 1, on: connection) else {
                        Issue.record("log \(n) was not written")
                        return
                    }
                    let answer = try #require(try JSONSerialization.jsonObject(with: Data(String(buffer: body).utf8)) as? [String: Any])
                    #expect(now == version + 1 && answer["version"] as? Int == now && eventWritten)
                    #expect(answer["status"] as? String == (n % 3 == 2 ? "completed" : "partial"))
                    #expect((answer["logged_sets"] as? [[String: Any]])?.compactMap { $0["set"] as? Int } == Array(1...(n % 3 + 1)))
                    #expect(try await env.count("SELECT count(*) FROM session_sets WHERE session_id = '\(session)'") == n % 3 + 1)
                    version = now
                }
                outbox.wrote()
            }
            #expect(plans.generic >= 5, "\(plans)")
            // The route's log and the ten above, each of which changed the log before it; the refused one never written.
            try await waitUntil(.seconds(10)) { try await env.live("workout.logged", to: coach).count == 11 }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await env.live("workout.logged", to: coach).count == 11)
        }
    }

    /// A log answers with the session as a read of it right after shows it, in the reader's unit
    /// and with its comments; a log of no sets is a log too (`partial`, nothing logged).
    @Test func aLogAnswersAsTheSessionReadsAfterIt() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let path = "/v1/training/sessions/\(id)"
            #expect(try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "UTC", "weight_unit": "lbs"]).status == .ok)
            #expect(try await env.call(.post, "\(path)/comments", as: coach, json: ["text": "Keep the back straight"]).status == .created)
            let logs: [([String: Any], Int)] = [
                (TrainingTestEnvironment.log(sets: 2, weight: ["weight_lbs": 135.5]), 2),
                (["performed_at": "\(TrainingTestEnvironment.day(0))T08:00:00+00:00", "sets": [Any]()], 0),
            ]
            for (body, sets) in logs {
                let logged = try await env.call(.post, "\(path)/log", as: client, json: body)
                try #require(logged.status == .ok, "\(logged.text)")
                let read = try await env.call(.get, path, as: client)
                #expect(NSDictionary(dictionary: logged.json) == NSDictionary(dictionary: read.json), "\(logged.text)\n\(read.text)")
                #expect((logged.json["logged_sets"] as? [Any])?.count == sets && logged.json["status"] as? String == "partial")
                #expect((logged.json["comments"] as? [Any])?.count == 1)
            }
        }
    }

    /// Logs of one session racing each other: each is answered, one of them is the session's log
    /// whole (never sets of one with the status of another), and each that changed the log the one
    /// before it left (in the order the versions tell) is one event for the coach.
    @Test func racingLogsLeaveOneWholeLog() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let path = "/v1/training/sessions/\(id)/log"
            let replies = try await withThrowingTaskGroup(of: ConcurrentClient.Reply.self) { group in
                for n in 0..<12 {
                    group.addTask { try await env.concurrentReply(.post, path, as: client, json: TrainingTestEnvironment.log(sets: n % 2 == 0 ? 1 : 3)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.map(\.status) == Array(repeating: 200, count: 12), "\(replies.map(\.status))")
            // Each answer is the log it sent, whole: never the sets of one with the status of another.
            for reply in replies {
                let sets = (reply.json["logged_sets"] as? [Any])?.count
                #expect((sets == 1 && reply.json["status"] as? String == "partial") || (sets == 3 && reply.json["status"] as? String == "completed"), "\(reply.json)")
            }
            let read = try await env.call(.get, "/v1/training/sessions/\(id)", as: client).json
            let logged = try #require(read["logged_sets"] as? [Any]).count
            #expect((logged == 1 && read["status"] as? String == "partial") || (logged == 3 && read["status"] as? String == "completed"), "\(read)")
            #expect(try await env.count("SELECT count(*) FROM session_sets WHERE session_id = '\(id)'") == logged)
            // Each answer's ETag is the version its log made: in that order, a log the same as the
            // one before it is not news.
            func version(_ reply: ConcurrentClient.Reply) -> Int { Int((reply.headers.first(name: "ETag") ?? "").filter(\.isNumber)) ?? -1 }
            let applied = replies.sorted { version($0) < version($1) }.map { ($0.json["logged_sets"] as? [Any])?.count ?? -1 }
            #expect(Set(replies.map(version)).count == 12 && !replies.map(version).contains(-1))
            let news = 1 + zip(applied, applied.dropFirst()).filter { $0 != $1 }.count
            #expect(try await env.written("workout.logged") == news)
            try await waitUntil(.seconds(10)) { try await env.live("workout.logged", to: coach).count == news }
        }
    }

    /// Weights given in pounds are kept in kilograms exactly and read back as given, in either unit;
    /// records are the Epley estimate's best set, dated by the day it was performed.
    @Test func poundsRoundTripExactlyAndRecordsUseEpley() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(-1), TrainingTestEnvironment.day(0)])
            #expect(try await env.call(.get, "/v1/training/settings", as: client).json["weight_unit"] as? String == "kg")
            let set = try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "America/New_York", "weight_unit": "lbs"])
            #expect(set.status == .ok && set.json["time_zone"] as? String == "America/New_York", "\(set.text)")
            var body = TrainingTestEnvironment.log(sets: 3, reps: 5, weight: ["weight_lbs": 225])
            body["performed_at"] = "2026-03-01T23:30:00-05:00"
            let logged = try await env.call(.post, "/v1/training/sessions/\(ids[0])/log", as: client, json: body)
            #expect(logged.status == .ok, "\(logged.text)")
            #expect(logged.json[path: "logged_sets.0.weight"] as? Double == 225 && logged.json["weight_unit"] as? String == "lbs")
            #expect(logged.json[path: "logged_sets.0.weight_kg"] as? Double == 102.05828325)
            #expect(try await env.count("SELECT count(*) FROM session_sets WHERE weight_kg = 102.05828325") == 3)
            // Prescribed weights are shown in the unit too.
            #expect(logged.json[path: "blocks.0.sets.0.weight_kg"] as? Double == 60.5 && logged.json[path: "blocks.0.sets.0.weight"] as? Double == 133.379669)
            // A set of 8 × 100 kg beats 5 × 225 lb (e1RM 126.67 kg against 119.07 kg).
            let kilos = try await env.call(
                .post, "/v1/training/sessions/\(ids[1])/log", as: client,
                json: ["performed_at": "2026-03-02T07:00:00+09:00", "sets": [["block": 1, "set": 1, "reps": 8, "weight_kg": 100, "done": true]]])
            #expect(kilos.status == .ok && kilos.json["status"] as? String == "partial")
            let records = try await env.call(.get, "/v1/training/records", as: client)
            #expect(records.items.count == 1 && records.json["weight_unit"] as? String == "lbs", "\(records.text)")
            let best = try #require(records.items.first)
            #expect(best["reps"] as? Int == 8 && best["weight_kg"] as? Double == 100 && best["estimated_1rm_kg"] as? Double == 126.67)
            // In pounds, the estimate itself rounded to hundredths, not the kilograms' rounding converted.
            #expect(best["estimated_1rm"] as? Double == 279.25, "\(records.text)")
            #expect(best["performed_on"] as? String == "2026-03-02" && (best["session_id"] as? String)?.lowercased() == ids[1])
            #expect(best["exercise_name"] as? String == "Pushups")

            _ = try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "UTC", "weight_unit": "kg"])
            let history = try await env.call(.get, "/v1/training/history?limit=1", as: client)
            #expect(history.ids == [ids[0]] && history.json[path: "items.0.logged_sets.0.weight"] as? Double == 102.05828325, "\(history.text)")
            let cursor = try #require(history.json["next_cursor"] as? String)
            #expect(try await env.call(.get, "/v1/training/history?limit=1&cursor=\(cursor)", as: client).ids == [ids[1]])
            let exercise = try #require(best["exercise_id"] as? String)
            #expect(try await env.call(.get, "/v1/training/history?exercise_id=\(exercise)", as: client).ids.count == 2)
            #expect(try await env.call(.get, "/v1/training/history?exercise_id=\(UUID())", as: client).ids.isEmpty)
            #expect(try await env.call(.get, "/v1/training/history?exercise_id=nope", as: client).code == "validation_failed")
            #expect(try await env.call(.get, "/v1/training/records", as: try await env.user()).items.isEmpty)
        }
    }

    /// Epley's estimate in exact arithmetic: 4 × 105 kg and 1 × 119 kg are both 119, so the record
    /// is the first day's set; 7 × 25.95 kg is 32.005, shown as 32.01.
    @Test func recordsCompareEstimatesExactly() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let ids = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(-1), TrainingTestEnvironment.day(0)])
            for (id, at, reps, kilograms) in [(ids[0], "2026-03-01T07:00:00Z", 4, 105.0), (ids[1], "2026-03-05T07:00:00Z", 1, 119.0)] {
                let logged = try await env.call(
                    .post, "/v1/training/sessions/\(id)/log", as: client,
                    json: ["performed_at": at, "sets": [["block": 1, "set": 1, "reps": reps, "weight_kg": kilograms, "done": true]]])
                #expect(logged.status == .ok, "\(logged.text)")
            }
            let best = try #require(try await env.call(.get, "/v1/training/records", as: client).items.first)
            #expect(best["performed_on"] as? String == "2026-03-01" && best["reps"] as? Int == 4, "\(best)")
            #expect(best["estimated_1rm_kg"] as? Double == 119)

            let (otherCoach, other, otherEntry, otherWorkout) = try await env.coachWithClient()
            let id = try await env.assign(otherWorkout, to: otherEntry, by: otherCoach, on: [TrainingTestEnvironment.day(0)])[0]
            let logged = try await env.call(
                .post, "/v1/training/sessions/\(id)/log", as: other,
                json: ["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "reps": 7, "weight_kg": 25.95, "done": true]]])
            #expect(logged.status == .ok, "\(logged.text)")
            let record = try #require(try await env.call(.get, "/v1/training/records", as: other).items.first)
            #expect(record["estimated_1rm_kg"] as? Double == 32.01 && record["estimated_1rm"] as? Double == 32.01, "\(record)")

            // The first day is the client's day as logged: 1 March in Los Angeles came after 2 March
            // had begun in Tokyo.
            let (thirdCoach, third, thirdEntry, thirdWorkout) = try await env.coachWithClient()
            let days = try await env.assign(thirdWorkout, to: thirdEntry, by: thirdCoach, on: [TrainingTestEnvironment.day(-1), TrainingTestEnvironment.day(0)])
            for (id, at, reps, kilograms) in [(days[0], "2026-03-02T01:00:00+09:00", 4, 105.0), (days[1], "2026-03-01T23:00:00-08:00", 1, 119.0)] {
                let logged = try await env.call(
                    .post, "/v1/training/sessions/\(id)/log", as: third,
                    json: ["performed_at": at, "sets": [["block": 1, "set": 1, "reps": reps, "weight_kg": kilograms, "done": true]]])
                #expect(logged.status == .ok, "\(logged.text)")
            }
            let first = try #require(try await env.call(.get, "/v1/training/records", as: third).items.first)
            #expect(first["performed_on"] as? String == "2026-03-01" && first["reps"] as? Int == 1, "\(first)")
        }
    }

    @Test func logsAndSettingsNameTheWrongField() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient(sets: 2)
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let path = "/v1/training/sessions/\(id)/log"
            let good: [String: Any] = ["block": 1, "set": 1, "reps": 5, "done": true]
            for (body, field) in [
                (["performed_at": "2026-03-01T07:00:00", "sets": [good]], "performed_at"),
                (["performed_at": "2026-13-01T07:00:00Z", "sets": [good]], "performed_at"),
                (["performed_at": "2099-03-01T07:00:00Z", "sets": [good]], "performed_at"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 2, "set": 1, "done": true]]], "sets[0].block"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [good, ["block": 0, "set": 1, "done": true]]], "sets[1].block"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 70000, "set": 1, "done": true]]], "sets[0].block"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [good, good]], "sets[1].set"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "reps": -1, "done": true]]], "sets[0].reps"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [good, ["block": 1, "set": 2, "reps": 1.5, "done": true]]], "sets[1].reps"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "duration_s": 2.5, "done": true]]], "sets[0].duration_s"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "weight_kg": 1e9, "done": true]]], "sets[0].weight_kg"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "weight_kg": 10, "weight_lbs": 22, "done": true]]], "sets[0].weight_lbs"),
                // In kilograms below the smallest Double: PostgreSQL could not write it in the answer.
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "weight_lbs": 5e-324, "done": true]]], "sets[0].weight_lbs"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "weight_kg": 0.0001, "done": true]]], "sets[0].weight_kg"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "rpe": 11, "done": true]]], "sets[0].rpe"),
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [good], "notes": String(repeating: "n", count: 2001)], "notes"),
                // The coach reads them: a carriage return alone could overwrite what a log viewer shows.
                (["performed_at": "2026-03-01T07:00:00Z", "sets": [good], "notes": "ok\rEVIL"], "notes"),
            ] as [([String: Any], String)] {
                let reply = try await env.call(.post, path, as: client, json: body)
                #expect(reply.status == .badRequest && reply.fieldErrors.contains(field), "\(body): \(reply.text)")
            }
            #expect(try await env.call(.post, path, as: client, json: ["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "done": "yes"]]]).status == .badRequest)
            // The session speaks first: a bad log of a session not the caller's is 404, as a good one is;
            // of the caller's, every problem is named, the block past the last among them.
            let both: [String: Any] = [
                "performed_at": "2026-03-01T07:00:00Z",
                "sets": [["block": 1, "set": 1, "weight_kg": 10, "weight_lbs": 22, "done": true], ["block": 2, "set": 1, "done": true]],
            ]
            #expect(try await env.call(.post, "/v1/training/sessions/\(UUID())/log", as: client, json: both).status == .notFound)
            #expect(try await env.call(.post, path, as: client, json: both).fieldErrors.sorted() == ["sets[0].weight_lbs", "sets[1].block"])
            #expect(try await env.call(.post, path, as: client, json: ["performed_at": "2026-03-01T07:00:00Z", "sets": [["block": 1, "set": 1, "done": true, "x": 1]]]).status == .badRequest)
            #expect(try await env.call(.post, path, as: client, raw: .init(string: "[1,"), headers: [.contentType: "application/json"]).status == .badRequest)
            #expect(try await env.count("SELECT count(*) FROM session_sets") == 0)
            let lines = try await env.call(.post, path, as: client, json: ["performed_at": "2026-03-01T07:00:00Z", "sets": [good], "notes": "Felt good\r\nLegs\tsore"])
            #expect(lines.status == .ok && lines.json["log_notes"] as? String == "Felt good\r\nLegs\tsore", "\(lines.text)")
            for (body, field) in [
                (["time_zone": "Mars/Olympus", "weight_unit": "kg"], "time_zone"),
                (["time_zone": "Europe/Lisbon", "weight_unit": "stone"], "weight_unit"),
                (["time_zone": String(repeating: "A", count: 200), "weight_unit": "kg"], "time_zone"),
            ] {
                let reply = try await env.call(.put, "/v1/training/settings", as: client, json: body)
                #expect(reply.status == .badRequest && reply.fieldErrors == [field], "\(reply.text)")
            }
            #expect(try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "UTC"]).status == .badRequest)
            #expect(try await env.call(.get, "/v1/training/settings").status == .unauthorized)
            #expect(try await env.call(.get, "/v1/training/sessions?from=2026-01-10&to=2026-01-01", as: client).fieldErrors == ["to"])
            #expect(try await env.call(.get, "/v1/training/sessions?from=2026-01-01&to=2026-12-01", as: client).fieldErrors == ["to"])
            #expect(try await env.call(.get, "/v1/training/sessions?from=tomorrow", as: client).fieldErrors == ["from"])
        }
    }

    /// Coach and client comment on a session; each one's comment is the other's live news.
    @Test func coachAndClientTalkAboutASession() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let fromClient = try await env.call(.post, "/v1/training/sessions/\(id)/comments", as: client, json: ["text": "Shoulder felt tight"])
            #expect(fromClient.status == .created && fromClient.json["author_role"] as? String == "client", "\(fromClient.text)")
            let fromCoach = try await env.call(.post, "/v1/training/sessions/\(id)/comments", as: coach, json: ["text": "  Drop the weight 10%  "])
            #expect(fromCoach.status == .created && fromCoach.json["author_role"] as? String == "coach" && fromCoach.json["text"] as? String == "Drop the weight 10%")
            try await waitUntil(.seconds(10)) {
                let toCoach = try await env.live("workout.commented", to: coach).count; let toClient = try await env.live("workout.commented", to: client).count; return toCoach == 1 && toClient == 1
            }
            #expect(try await env.live("workout.commented", to: client).first?.contains("Drop the weight 10%") == true)
            let session = try await env.call(.get, "/v1/training/sessions/\(id)", as: client)
            #expect((session.json["comments"] as? [[String: Any]])?.compactMap { $0["text"] as? String } == ["Shoulder felt tight", "Drop the weight 10%"])
            for text in ["", "   ", String(repeating: "c", count: 2001), "bad\u{0}"] {
                #expect(try await env.call(.post, "/v1/training/sessions/\(id)/comments", as: client, json: ["text": text]).fieldErrors == ["text"])
            }
            #expect(try await env.call(.post, "/v1/training/sessions/\(id)/comments", as: client, json: ["text": 5]).status == .badRequest)
        }
    }

    /// A thread holds at most `maxComments`: racing comments for the last places get exactly those
    /// places, the detail carries the latest ones, and the list pages through all of them in order.
    @Test func aSessionsThreadIsCappedAndPaged() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let kept = SessionStore.maxComments - 2
            try await env.execute(
                """
                INSERT INTO session_comments (id, session_id, author_id, author_role, text, created_at)
                SELECT gen_random_uuid(), '\(id)', '\(client.id)', 'client', 'note ' || n, now() - interval '1 hour' + n * interval '1 second'
                FROM generate_series(1, \(kept)) AS n
                """)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for n in 0..<6 {
                    group.addTask {
                        try await env.concurrentCall(.post, "/v1/training/sessions/\(id)/comments", as: n.isMultiple(of: 2) ? client : coach, json: ["text": "race \(n)"])
                    }
                }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .created }.count == 2 && statuses.filter { $0 == .conflict }.count == 4, "\(statuses)")
            let refused = try await env.call(.post, "/v1/training/sessions/\(id)/comments", as: coach, json: ["text": "one more"])
            #expect(refused.status == .conflict && refused.json["code"] as? String == "comment_limit", "\(refused.text)")

            let detail = try await env.call(.get, "/v1/training/sessions/\(id)", as: coach)
            let latest = (detail.json["comments"] as? [[String: Any]])?.compactMap { $0["text"] as? String } ?? []
            #expect(latest.count == SessionStore.commentsInDetail && latest.first == "note \(kept - SessionStore.commentsInDetail + 3)")
            #expect(latest.suffix(2).allSatisfy { $0.hasPrefix("race ") })

            var texts: [String] = []
            var cursor: String?
            repeat {
                let query = cursor.map { "&cursor=\($0)" } ?? ""
                let page = try await env.call(.get, "/v1/training/sessions/\(id)/comments?limit=100\(query)", as: client)
                #expect(page.status == .ok, "\(page.text)")
                texts += (page.json["items"] as? [[String: Any]])?.compactMap { $0["text"] as? String } ?? []
                cursor = page.json["next_cursor"] as? String
            } while cursor != nil && texts.count <= SessionStore.maxComments
            #expect(texts.count == SessionStore.maxComments && Set(texts).count == texts.count)
            #expect(Array(texts.prefix(kept)) == (1...kept).map { "note \($0)" })
            #expect(try await env.call(.get, "/v1/training/sessions/\(id)/comments?cursor=nonsense", as: client).status == .badRequest)
        }
    }

    /// A comment that waited for the session's lock behind another is timed after it: a reader who
    /// paged past the first by time does not skip the second, which committed later.
    @Test func aCommentThatWaitedIsTimedAfterTheOneItWaitedFor() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let (started, starting) = AsyncStream<Task<APIReply, any Error>>.makeStream()
            // The coach's comment begins, and waits for the lock held here; meanwhile the client's
            // comment, made under the lock, commits first.
            try await env.inOpenTransaction(
                ["SELECT 1 FROM sessions WHERE id = '\(id)' FOR UPDATE"],
                while: {
                    starting.yield(Task { try await env.call(.post, "/v1/training/sessions/\(id)/comments", as: coach, json: ["text": "waited"]) })
                    starting.finish()
                    try await env.awaitLockWait()
                },
                thenBeforeCommit: [
                    """
                    INSERT INTO session_comments (id, session_id, author_id, author_role, text, created_at)
                    VALUES (gen_random_uuid(), '\(id)', '\(client.id)', 'client', 'first', clock_timestamp())
                    """
                ])
            for await task in started { #expect(try await task.value.status == .created) }
            let page = try await env.call(.get, "/v1/training/sessions/\(id)/comments", as: client)
            #expect((page.json["items"] as? [[String: Any]])?.compactMap { $0["text"] as? String } == ["first", "waited"], "\(page.text)")
        }
    }

    /// Every answer that shows a session shows its version, the one its detail gives as `ETag`: the
    /// assignment's answer, the coach's view of the client, History; and a log corrected from History
    /// with that version in `If-Match` is taken.
    @Test func everyViewOfASessionShowsItsVersion() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let assigned = try await env.call(
                .post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": workout, "dates": [TrainingTestEnvironment.day(0)]])
            let id = try #require(assigned.ids.first, "\(assigned.text)")
            func tag() async throws -> String { try #require(try await env.call(.get, "/v1/training/sessions/\(id)", as: client).headers[.eTag]) }
            #expect("\"\(assigned.items.first?["version"] as? Int ?? -1)\"" == (try await tag()), "\(assigned.text)")

            let logged = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [.ifMatch: try await tag()])
            #expect(logged.status == .ok, "\(logged.text)")
            let history = try await env.call(.get, "/v1/training/history", as: client)
            let historyVersion = try #require(history.items.first?["version"] as? Int, "\(history.text)")
            #expect("\"\(historyVersion)\"" == (try await tag()) && historyVersion > 1)
            let day = TrainingTestEnvironment.day(0)
            let view = try await env.call(.get, "/v1/training/clients/\(entry)?from=\(day)&to=\(day)", as: coach)
            #expect("\"\(view.items.first?["version"] as? Int ?? -1)\"" == (try await tag()), "\(view.text)")

            let corrected = try await env.call(
                .post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 2), headers: [.ifMatch: "\"\(historyVersion)\""])
            #expect(corrected.status == .ok, "\(corrected.text)")
        }
    }

    /// The resend of a log whose answer was lost names the version the app showed, which the log
    /// itself moved on: when the session holds exactly that log, written over that version, it is
    /// answered as the log was (RFC 9110 §13.1.1), writing nothing; any difference (a set fewer, a
    /// rep, a weight, the time) is still `412`, and so is the same log made by another device after
    /// a push, filed under blocks the resending app never showed.
    @Test func aLogResentUnderItsOldVersionIsAnsweredAsLogged() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let path = "/v1/training/sessions/\(id)/log"
            let shown = try #require(try await env.call(.get, "/v1/training/sessions/\(id)", as: client).headers[.eTag])
            var body = TrainingTestEnvironment.log(sets: 3, weight: ["weight_lbs": 135.5])
            body["notes"] = "Felt strong"
            let logged = try await env.call(.post, path, as: client, json: body, headers: [.ifMatch: shown])
            try #require(logged.status == .ok, "\(logged.text)")
            #expect(try await env.written("workout.logged") == 1)

            let resent = try await env.call(.post, path, as: client, json: body, headers: [.ifMatch: shown])
            #expect(resent.status == .ok, "\(resent.text)")
            #expect(resent.headers[.eTag] == logged.headers[.eTag] && logged.headers[.eTag] != shown)
            #expect(NSDictionary(dictionary: resent.json) == NSDictionary(dictionary: logged.json), "\(resent.text)\n\(logged.text)")
            #expect(try await env.written("workout.logged") == 1)

            var changes: [[String: Any]] = [TrainingTestEnvironment.log(sets: 2, weight: ["weight_lbs": 135.5]), TrainingTestEnvironment.log(sets: 3, weight: ["weight_lbs": 135.5])]
            changes[0]["notes"] = "Felt strong"
            var moreReps = TrainingTestEnvironment.log(sets: 3, reps: 9, weight: ["weight_lbs": 135.5])
            moreReps["notes"] = "Felt strong"
            var later = body
            later["performed_at"] = "\(TrainingTestEnvironment.day(0))T07:31:00+00:00"
            var heavier = TrainingTestEnvironment.log(sets: 3, weight: ["weight_lbs": 140])
            heavier["notes"] = "Felt strong"
            changes += [moreReps, later, heavier]
            for change in changes {
                let refused = try await env.call(.post, path, as: client, json: change, headers: [.ifMatch: shown])
                #expect(refused.status == .preconditionFailed && refused.headers[.eTag] == logged.headers[.eTag], "\(refused.text)")
            }
            #expect(try await env.call(.get, "/v1/training/sessions/\(id)", as: client).headers[.eTag] == logged.headers[.eTag])
            // Another client's session is still not found, the same log or not.
            let (_, other, _, _) = try await env.coachWithClient()
            #expect(try await env.call(.post, path, as: other, json: body, headers: [.ifMatch: shown]).status == .notFound)

            // One app shows the session; the coach pushes other blocks; another device logs them. The
            // first app's log, the same sets to the letter, is not that log.
            let next = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(1)])[0]
            let nextPath = "/v1/training/sessions/\(next)/log"
            let shownFirst = try #require(try await env.call(.get, "/v1/training/sessions/\(next)", as: client).headers[.eTag])
            let plank = try await env.libraryExercise("Plank")
            #expect(try await env.call(.put, "/v1/workouts/\(workout)", as: coach, json: TrainingTestEnvironment.workout(plank, name: "Core day")).status == .ok)
            #expect(try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach).json["updated"] as? Int == 1)
            let pushed = try #require(try await env.call(.get, "/v1/training/sessions/\(next)", as: client).headers[.eTag])
            let plain = TrainingTestEnvironment.log(sets: 3)
            let fromOther = try await env.call(.post, nextPath, as: client, json: plain, headers: [.ifMatch: pushed])
            #expect(fromOther.status == .ok && fromOther.json[path: "logged_sets.0.exercise_name"] as? String == "Plank", "\(fromOther.text)")
            let late = try await env.call(.post, nextPath, as: client, json: plain, headers: [.ifMatch: shownFirst])
            #expect(late.status == .preconditionFailed && late.headers[.eTag] == fromOther.headers[.eTag], "\(late.text)")
            // The resend of that other device's log is its own.
            #expect(try await env.call(.post, nextPath, as: client, json: plain, headers: [.ifMatch: pushed]).status == .ok)
        }
    }

    /// An app logs the session as it showed it: with its `ETag` in `If-Match`, a log after the coach
    /// pushed new blocks is refused rather than filed under exercises the client never saw; a pushed
    /// session not logged since is not logged without `If-Match`.
    @Test func aLogNamingTheSessionAsShownIsRefusedAfterAPush() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try #require(try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)]).first)
            let shown = try await env.call(.get, "/v1/training/sessions/\(id)", as: client)
            let shownTag = try #require(shown.headers[.eTag])
            #expect(shown.json[path: "blocks.0.exercise_name"] as? String == "Pushups")
            // Today shows the same version, which is what an app that showed today sends.
            let listed = try await env.call(.get, "/v1/training/today", as: client)
            let listedVersion = try #require(listed.items.first?["version"] as? Int, "\(listed.text)")
            #expect("\"\(listedVersion)\"" == shownTag && shown.json["version"] as? Int == listedVersion)

            let plank = try await env.libraryExercise("Plank")
            #expect(try await env.call(.put, "/v1/workouts/\(workout)", as: coach, json: TrainingTestEnvironment.workout(plank, name: "Core day")).status == .ok)
            #expect(try await env.call(.post, "/v1/workouts/\(workout)/push", as: coach).json["updated"] as? Int == 1)

            // Without If-Match nothing tells which blocks the client saw: refused until it says, a skip
            // in between or not.
            let unsaid = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3))
            #expect(unsaid.status == .preconditionRequired && unsaid.code == "precondition_required", "\(unsaid.text)")
            // `*` matches any version, so it says none.
            let anyVersion = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [.ifMatch: "*"])
            #expect(anyVersion.status == .preconditionRequired, "\(anyVersion.text)")
            // A skip answers with the session's new ETag, as a read of it would.
            let skipped = try await env.call(.post, "/v1/training/sessions/\(id)/skip", as: client)
            #expect(skipped.status == .ok)
            let afterSkip = try await env.call(.get, "/v1/training/sessions/\(id)", as: client)
            #expect(skipped.headers[.eTag] != nil && skipped.headers[.eTag] == afterSkip.headers[.eTag])
            let skippedFirst = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3))
            #expect(skippedFirst.status == .preconditionRequired, "\(skippedFirst.text)")
            let stale = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [.ifMatch: shownTag])
            #expect(stale.status == .preconditionFailed, "\(stale.text)")
            let staleList = try await env.call(
                .post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [.ifMatch: "\"\(listedVersion)\""])
            #expect(staleList.status == .preconditionFailed, "\(staleList.text)")
            #expect(stale.code == "precondition_failed")
            let staleOrAny = try await env.call(
                .post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [.ifMatch: "\(shownTag), *"])
            #expect(staleOrAny.status == .preconditionFailed, "\(staleOrAny.text)")
            #expect(try await env.count("SELECT count(*) FROM session_sets") == 0)
            let current = try await env.call(.get, "/v1/training/sessions/\(id)", as: client)
            let currentTag = try #require(current.headers[.eTag])
            #expect(stale.headers[.eTag] == currentTag && currentTag != shownTag)

            let logged = try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 3), headers: [.ifMatch: currentTag])
            #expect(logged.status == .ok, "\(logged.text)")
            #expect(logged.json[path: "logged_sets.0.exercise_name"] as? String == "Plank")
            // The log's ETag is the session's as it now reads. Once logged, the session is the one the
            // client saw: a correction without If-Match is taken, as for a session never pushed.
            #expect(logged.headers[.eTag] == (try await env.call(.get, "/v1/training/sessions/\(id)", as: client)).headers[.eTag])
            #expect(try await env.call(.post, "/v1/training/sessions/\(id)/log", as: client, json: TrainingTestEnvironment.log(sets: 2)).status == .ok)
        }
    }
}
