import Foundation
import HTTPTypes
import Models
import ServiceKit
import Testing
import TestSupport
@testable import Training

/// Who reaches which session route: the role wall for every documented route, another user's ids,
/// and what account deletion leaves.
@Suite struct SessionAccessTests {
    /// Who may call each of training's operations: coaches only, everyone but coaches (the client's
    /// side), or any signed-in user. Every operation `openapi.yaml` documents is here.
    static let walls: [String: Wall] = [
        "GET /v1/exercises": .anyone, "GET /v1/exercises/{id}": .anyone,
        "POST /v1/exercises": .coach, "PATCH /v1/exercises/{id}": .coach, "DELETE /v1/exercises/{id}": .coach,
        "POST /v1/workouts": .coach, "GET /v1/workouts": .coach, "GET /v1/workouts/{id}": .coach, "PUT /v1/workouts/{id}": .coach,
        "DELETE /v1/workouts/{id}": .coach, "POST /v1/workouts/{id}/push": .coach,
        "POST /v1/training/clients/{client_id}/assignments": .coach, "GET /v1/training/clients/{client_id}": .coach,
        "DELETE /v1/training/sessions/{id}": .coach,
        "GET /v1/training/today": .client, "GET /v1/training/sessions": .client, "POST /v1/training/sessions/{id}/log": .client,
        "POST /v1/training/sessions/{id}/skip": .client, "GET /v1/training/history": .client, "GET /v1/training/records": .client,
        "GET /v1/training/sessions/{id}": .party, "POST /v1/training/sessions/{id}/comments": .party,
        "GET /v1/training/sessions/{id}/comments": .party,
        "GET /v1/training/settings": .anyone, "PUT /v1/training/settings": .anyone,
        "GET /healthz": .open,
    ]

    enum Wall { case coach, client, party, anyone, open }

    /// Coach-only routes answer `403 forbidden` to a client, client-only ones to a coach, whatever
    /// the ids and body; no route answers anyone without a token.
    @Test func theRoleWallHoldsForEveryRoute() async throws {
        let operations = try OpenAPIDocument.operations(of: "Training").map { "\($0.method.uppercased()) \($0.path)" }
        #expect(Set(operations) == Set(Self.walls.keys), "documented: \(operations.sorted())")
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let client = try await env.client()
            for operation in operations.sorted() {
                let parts = operation.split(separator: " ")
                let method = HTTPRequest.Method(rawValue: String(parts[0]))!
                let path = String(parts[1]).replacing(#/\{[^}]*\}/#, with: UUID().uuidString)
                if Self.walls[operation] != .open {
                    #expect(try await env.call(method, path, json: [:] as [String: Any]).status == .unauthorized, "\(operation)")
                }
                switch Self.walls[operation] {
                case .coach:
                    let reply = try await env.call(method, path, as: client, json: [:] as [String: Any])
                    #expect(reply.status == .forbidden && reply.code == "forbidden", "\(operation): \(reply.text)")
                case .client:
                    let reply = try await env.call(method, path, as: coach, json: [:] as [String: Any])
                    #expect(reply.status == .forbidden && reply.code == "forbidden", "\(operation): \(reply.text)")
                default:
                    break
                }
            }
        }
    }

    /// Each id route, with another party's id, is `404` as if the id did not exist.
    @Test func anotherUsersIdsAreNotFound() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let id = try await env.assign(workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0)])[0]
            let otherCoach = try await env.coach()
            let otherClient = try await env.client()
            let log = TrainingTestEnvironment.log(sets: 3)
            for (method, path, user, body, code) in [
                (HTTPRequest.Method.get, "/v1/training/sessions/\(id)", otherClient, nil, "session_not_found"),
                (.get, "/v1/training/sessions/\(id)", otherCoach, nil, "session_not_found"),
                (.post, "/v1/training/sessions/\(id)/log", otherClient, log, "session_not_found"),
                (.post, "/v1/training/sessions/\(id)/skip", otherClient, nil, "session_not_found"),
                (.post, "/v1/training/sessions/\(id)/comments", otherClient, ["text": "hi"], "session_not_found"),
                (.post, "/v1/training/sessions/\(id)/comments", otherCoach, ["text": "hi"], "session_not_found"),
                (.get, "/v1/training/sessions/\(id)/comments", otherClient, nil, "session_not_found"),
                (.get, "/v1/training/sessions/\(id)/comments", otherCoach, nil, "session_not_found"),
                (.delete, "/v1/training/sessions/\(id)", otherCoach, nil, "session_not_found"),
                (.get, "/v1/training/clients/\(entry)", otherCoach, nil, "client_not_found"),
                (.post, "/v1/training/clients/\(entry)/assignments", otherCoach, ["workout_id": workout, "dates": ["2030-01-01"]], "client_not_found"),
                (.post, "/v1/workouts/\(workout)/push", otherCoach, nil, "workout_not_found"),
                (.get, "/v1/training/sessions/not-a-uuid", client, nil, "session_not_found"),
            ] as [(HTTPRequest.Method, String, TrainingTestEnvironment.User, [String: Any]?, String)] {
                let reply = try await env.call(method, path, as: user, json: body)
                #expect(reply.status == .notFound && reply.code == code, "\(method) \(path): \(reply.text)")
            }
            #expect(try await env.call(.get, "/v1/training/today", as: otherClient).items.isEmpty)
            #expect(try await env.call(.get, "/v1/training/history", as: otherClient).items.isEmpty)
            // Nothing changed.
            #expect(try await env.call(.get, "/v1/training/sessions/\(id)", as: client).json["status"] as? String == "scheduled")
            #expect(try await env.count("SELECT count(*) FROM session_comments") == 0)
        }
    }

    /// A deleted client's sessions and logs go; a deleted coach's workouts and plans go, and the
    /// client keeps what they performed without the coach's id.
    @Test func aDeletedClientLosesAllAndADeletedCoachTheirPlans() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            let ids = try await env.assign(
                workout, to: entry, by: coach, on: [TrainingTestEnvironment.day(0), TrainingTestEnvironment.day(3), TrainingTestEnvironment.day(-1)])
            // Sent again below with its key: the same body, whatever the day by then.
            let logged = TrainingTestEnvironment.log(sets: 3)
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[0])/log", as: client, json: logged, headers: [HTTPField.Name("Idempotency-Key")!: "log-1"]).status == .ok)
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[2])/skip", as: client, json: ["reason": "away"]).status == .ok)
            _ = try await env.call(.post, "/v1/training/sessions/\(ids[0])/comments", as: coach, json: ["text": "Great work"], headers: [HTTPField.Name("Idempotency-Key")!: "comment-1"])
            let thanks = ["text": "Thanks"]
            let thanked: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "comment-2"]
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[0])/comments", as: client, json: thanks, headers: thanked).status == .created)
            let pending = try await env.rosterEntry(of: coach)
            _ = try await env.assign(workout, to: pending, by: coach, on: [TrainingTestEnvironment.day(1)])

            let beforeDeletion = TrainingTestEnvironment.moment(Date().addingTimeInterval(-60))
            try await env.publish(UserDeleted(userID: coach.id), userID: coach.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM workouts") == 0 }
            // The answers kept for retries hold what was written: the deleted coach's go.
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(coach.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys WHERE user_id = '\(client.id)'") == 2)
            // The client's kept answers that name the coach (the logged session's coach) are
            // withheld: a retry is not shown them, and logs nothing again. Their own comment's stays.
            let retried = try await env.call(
                .post, "/v1/training/sessions/\(ids[0])/log", as: client, json: logged, headers: [HTTPField.Name("Idempotency-Key")!: "log-1"])
            #expect(retried.status == .conflict && retried.code == "idempotency_answer_withheld", "\(retried.text)")
            let replayed = try await env.call(.post, "/v1/training/sessions/\(ids[0])/comments", as: client, json: thanks, headers: thanked)
            #expect(replayed.status == .created && replayed.headers[HTTPField.Name("Idempotent-Replayed")!] == "true", "\(replayed.text)")
            #expect(!replayed.text.contains(coach.id.uuidString.lowercased()))
            let kept = try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: client)
            #expect(kept.status == .ok && kept.json["coach_id"] is NSNull && kept.json["status"] as? String == "completed")
            #expect((kept.json["comments"] as? [[String: Any]])?.compactMap { $0["text"] as? String } == ["Thanks"] && (kept.json["logged_sets"] as? [Any])?.count == 3)
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[1])", as: client).json["status"] as? String == "cancelled")
            // Skipped is not performed: cancelled too, and no longer open to a log.
            #expect(try await env.call(.get, "/v1/training/sessions/\(ids[2])", as: client).json["status"] as? String == "cancelled")
            var afterDeletion = TrainingTestEnvironment.log(sets: 1)
            afterDeletion["performed_at"] = TrainingTestEnvironment.moment(Date().addingTimeInterval(2))
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[2])/log", as: client, json: afterDeletion).code == "session_cancelled")
            // Done before the coach's account went (the app was offline): taken, and the client's.
            var offline = TrainingTestEnvironment.log(sets: 3)
            offline["performed_at"] = beforeDeletion
            let late = try await env.call(.post, "/v1/training/sessions/\(ids[1])/log", as: client, json: offline)
            #expect(late.status == .ok && late.json["status"] as? String == "completed" && late.json["coach_id"] is NSNull, "\(late.text)")
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE roster_entry_id = '\(pending)' OR client_id IS NULL") == 0)
            #expect(try await env.count("SELECT count(*) FROM roster_entries") == 0)
            // A late acceptance names the deleted coach: nothing is made again.
            try await env.publish(ClientInvited(rosterEntryID: UUID(), coachID: coach.id), userID: coach.id)
            _ = try await env.rosterEntry(of: try await env.coach())
            #expect(try await env.count("SELECT count(*) FROM roster_entries") == 1)

            try await env.publish(UserDeleted(userID: client.id), userID: client.id, producer: "auth")
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM sessions") == 0 }
            #expect(try await env.count("SELECT count(*) FROM session_sets") == 0)
            #expect(try await env.count("SELECT count(*) FROM idempotency_keys") == 0)
            #expect(try await env.count("SELECT count(*) FROM deleted_accounts") == 2)
        }
    }

    /// A deletion running beside a write of the account's sessions (an assignment holds its roster
    /// entry until it commits) waits for the write, and leaves none of its sessions.
    @Test func aDeletionWaitsForSessionsBeingWritten() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, _) = try await env.coachWithClient()
            try await env.inOpenTransaction([
                "SELECT 1 FROM roster_entries WHERE id = '\(entry)' FOR SHARE",
                """
                INSERT INTO sessions (id, coach_id, roster_entry_id, client_id, name, blocks, scheduled_on)
                VALUES (gen_random_uuid(), '\(coach.id)', '\(entry)', '\(client.id)', 'In flight', '[]', current_date)
                """,
            ]) {
                try await env.publish(UserDeleted(userID: client.id), userID: client.id, producer: "auth")
                try await env.awaitLockWait()
            }
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM deleted_accounts") == 1 }
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE client_id = '\(client.id)'") == 0)
        }
    }
}
