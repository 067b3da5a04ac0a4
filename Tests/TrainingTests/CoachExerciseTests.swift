import Foundation
import HTTPTypes
import Models
import NIOCore
import ServiceKitEvents
import Testing
import TestSupport

/// A coach's own exercises: written by coaches only, seen by the coach and the coach's clients
/// only, changed by the coach only, never deleted while a workout uses them.
@Suite struct CoachExerciseTests {
    static var sled: [String: Any] {
        [
            "name": "Sled push", "category": "strongman", "level": "intermediate", "equipment": "other", "force": "push", "mechanic": "compound",
            "primary_muscles": ["quadriceps"], "secondary_muscles": ["glutes", "calves"], "instructions": ["Lean in.", "Drive."],
            "images": ["https://example.com/sled.jpg"],
        ]
    }

    @Test func onlyTheCoachAndTheCoachsClientsSeeIt() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let client = try await env.client()
            let otherClient = try await env.client()
            let otherCoach = try await env.coach()
            let stranger = try await env.user()
            try await env.link(coach: coach, client: client)
            try await env.link(coach: otherCoach, client: otherClient)
            let created = try await env.call(.post, "/v1/exercises", as: coach, json: Self.sled)
            #expect(created.status == .created && created.headers[.eTag] != nil, "\(created.text)")
            #expect(created.json["source"] as? String == "coach" && created.json["coach_id"] as? String == coach.path)
            let id = try #require(created.json["id"] as? String)
            #expect(created.headers[.location] == "/v1/exercises/\(id)")
            for viewer in [coach, client] {
                #expect(try await env.call(.get, "/v1/exercises/\(id)", as: viewer).status == .ok)
                #expect(try await env.call(.get, "/v1/exercises?q=sled%20pushes", as: viewer).ids.contains(id))
                #expect(try await env.call(.get, "/v1/exercises?muscle=quadriceps&limit=100&q=sled", as: viewer).ids.contains(id))
            }
            for viewer in [otherCoach, otherClient, stranger] {
                #expect(try await env.call(.get, "/v1/exercises/\(id)", as: viewer).code == "exercise_not_found")
                #expect(try await env.call(.get, "/v1/exercises?q=sled%20push", as: viewer).ids.contains(id) == false)
            }
            // Once the link ends, the client no longer sees it.
            try await env.execute("DELETE FROM coach_links WHERE client_id = '\(client.id)'")
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: client).status == .notFound)
        }
    }

    /// A page's cursor holds the name as the database sorts it: Swift lowercases `É` where
    /// PostgreSQL's `lower` under the C locale keeps it, so a cursor of Swift's made the next page
    /// skip the names that sort between the two.
    @Test func pagesOfNonASCIINamesSkipNothing() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            var made: Set<String> = []
            for name in ["Ézzqwx alpha", "Ézzqwx bravo", "Ézzqwx delta"] {
                let created = try await env.call(.post, "/v1/exercises", as: coach, json: Self.sled.merging(["name": name]) { $1 })
                made.insert(try #require(created.json["id"] as? String, "\(created.text)"))
            }
            for query in ["&q=zzqwx", "&equipment=other&muscle=quadriceps&level=intermediate"] {
                var seen: [String] = []
                var cursor: String?
                repeat {
                    let reply = try await env.call(.get, "/v1/exercises?limit=1\(query)\(cursor.map { "&cursor=\($0)" } ?? "")", as: coach)
                    #expect(reply.status == .ok, "\(reply.text)")
                    seen += reply.ids
                    cursor = reply.json["next_cursor"] as? String
                } while cursor != nil && seen.count < 1_000
                #expect(Set(seen).count == seen.count, "\(query)")
                #expect(made.isSubset(of: Set(seen)), "\(query): \(seen.count) seen")
            }
        }
    }

    /// The link comes from invitations' events: the client sees the coach's exercises from the
    /// acceptance, and no longer once the link ends.
    @Test func aClientSeesThemFromTheAcceptanceUntilTheLinkEnds() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let client = try await env.client()
            let id = try #require(try await env.call(.post, "/v1/exercises", as: coach, json: Self.sled).json["id"] as? String)
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: client).status == .notFound)
            let stream = EventStream(redis: env.redis, name: env.config.events.stream)
            try await stream.publish(
                InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: UUID()), producer: "invitations", userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.call(.get, "/v1/exercises/\(id)", as: client).status == .ok }
            #expect(try await env.call(.get, "/v1/exercises?q=sled%20push", as: client).ids.contains(id))
            try await stream.publish(
                ClientUnlinked(coachID: coach.id, clientID: client.id, reason: .left, hasOtherCoach: false), producer: "invitations", userID: client.id)
            try await waitUntil(.seconds(10)) { try await env.call(.get, "/v1/exercises/\(id)", as: client).status == .notFound }
            #expect(try await env.call(.get, "/v1/exercises?q=sled%20push", as: client).ids.contains(id) == false)
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: coach).status == .ok)
        }
    }

    @Test func theRoleWallAndOwnership() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let client = try await env.client()
            let plain = try await env.user()
            try await env.link(coach: coach, client: client)
            let id = try #require(try await env.call(.post, "/v1/exercises", as: coach, json: Self.sled).json["id"] as? String)
            for caller in [client, plain] {
                #expect(try await env.call(.post, "/v1/exercises", as: caller, json: Self.sled).code == "forbidden")
                #expect(try await env.call(.patch, "/v1/exercises/\(id)", as: caller, json: ["name": "Mine"]).code == "forbidden")
                #expect(try await env.call(.delete, "/v1/exercises/\(id)", as: caller).code == "forbidden")
            }
            #expect(try await env.call(.post, "/v1/exercises", json: Self.sled).status == .unauthorized)
            let otherCoach = try await env.coach()
            #expect(try await env.call(.patch, "/v1/exercises/\(id)", as: otherCoach, json: ["name": "Mine"]).code == "exercise_not_found")
            #expect(try await env.call(.delete, "/v1/exercises/\(id)", as: otherCoach).code == "exercise_not_found")
            let library = try await env.libraryExercise("Pushups")
            let changeLibrary = try await env.call(.patch, "/v1/exercises/\(library)", as: coach, json: ["name": "Mine"])
            #expect(changeLibrary.status == .forbidden && changeLibrary.code == "forbidden")
            #expect(try await env.call(.delete, "/v1/exercises/\(library)", as: coach).status == .forbidden)
            #expect(try await env.count("SELECT count(*) FROM exercises WHERE name = 'Pushups'") == 1)
            // Nothing changed by any of them.
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: coach).json["name"] as? String == "Sled push")
        }
    }

    @Test func patchChangesTheFieldsSentUnderIfMatch() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let created = try await env.call(.post, "/v1/exercises", as: coach, json: Self.sled)
            let id = try #require(created.json["id"] as? String)
            let etag = try #require(created.headers[.eTag])
            let changed = try await env.call(.patch, "/v1/exercises/\(id)", as: coach, json: ["level": "expert", "force": NSNull()], headers: [.ifMatch: etag])
            #expect(changed.status == .ok && changed.json["level"] as? String == "expert" && changed.json["force"] is NSNull)
            #expect(changed.json["name"] as? String == "Sled push" && changed.json["secondary_muscles"] as? [String] == ["glutes", "calves"])
            #expect(changed.headers[.eTag] != nil && changed.headers[.eTag] != etag)
            let stale = try await env.call(.patch, "/v1/exercises/\(id)", as: coach, json: ["level": "beginner"], headers: [.ifMatch: etag])
            #expect(stale.status == .preconditionFailed && stale.code == "precondition_failed")
            #expect(try await env.call(.delete, "/v1/exercises/\(id)", as: coach, headers: [.ifMatch: etag]).status == .preconditionFailed)
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: coach).json["level"] as? String == "expert")
            let cleared = try await env.call(.patch, "/v1/exercises/\(id)", as: coach, json: ["name": NSNull()])
            #expect(cleared.status == .badRequest && cleared.fieldErrors == ["name"])
        }
    }

    @Test func refusesBadBodiesNamingTheField() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let json: HTTPFields = [.contentType: "application/json"]
            #expect(try await env.call(.post, "/v1/exercises", as: coach, raw: ByteBuffer(string: "{\"name\": "), headers: json).code == "malformed_json")
            #expect(try await env.call(.post, "/v1/exercises", as: coach, raw: ByteBuffer(), headers: json).code == "malformed_json")
            let huge = ByteBuffer(string: "{\"name\": \"" + String(repeating: "a", count: 3 << 20) + "\"}")
            #expect(try await env.call(.post, "/v1/exercises", as: coach, raw: huge, headers: json).status == .contentTooLarge)
            let wrong = try await env.call(.post, "/v1/exercises", as: coach, json: ["name": 5])
            #expect(wrong.status == .badRequest && wrong.fieldErrors == ["name"])
            let unknown = try await env.call(.post, "/v1/exercises", as: coach, json: ["name": "Row", "muscle": "lats"])
            #expect(unknown.status == .badRequest && unknown.fieldErrors == ["muscle"])
            let bad = try await env.call(
                .post, "/v1/exercises", as: coach,
                json: [
                    "name": "  ", "level": "godlike", "primary_muscles": ["chest", "wings"], "secondary_muscles": ["lats", "lats"],
                    "instructions": [""], "images": ["http://example.com/a.jpg"], "equipment": "spoon",
                ])
            #expect(bad.status == .badRequest && bad.code == "validation_failed")
            #expect(Set(bad.fieldErrors) == ["name", "level", "primary_muscles[1]", "secondary_muscles", "instructions[0]", "images[0]", "equipment"])
            #expect(try await env.count("SELECT count(*) FROM exercises WHERE coach_id IS NOT NULL") == 0)
            #expect(try await env.call(.post, "/v1/exercises", as: coach, json: ["name": "Sled push"]).status == .created)
            let duplicate = try await env.call(.post, "/v1/exercises", as: coach, json: ["name": "SLED PUSH"])
            #expect(duplicate.status == .conflict && duplicate.code == "exercise_exists")
            let other = try await env.call(.post, "/v1/exercises", as: coach, json: ["name": "Sled pull"])
            let otherID = try #require(other.json["id"] as? String)
            #expect(try await env.call(.patch, "/v1/exercises/\(otherID)", as: coach, json: ["name": "sled push"]).code == "exercise_exists")
            // Another coach may use the same name.
            #expect(try await env.call(.post, "/v1/exercises", as: try await env.coach(), json: ["name": "Sled push"]).status == .created)
        }
    }

    @Test func oneInUseIsNotDeleted() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let id = try #require(try await env.call(.post, "/v1/exercises", as: coach, json: Self.sled).json["id"] as? String)
            let workout = try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(id))
            #expect(workout.status == .created, "\(workout.text)")
            let workoutID = try #require(workout.json["id"] as? String)
            let refused = try await env.call(.delete, "/v1/exercises/\(id)", as: coach)
            #expect(refused.status == .conflict && refused.code == "exercise_in_use")
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: coach).status == .ok)
            // Taken out of the workout, it goes.
            let library = try await env.libraryExercise("Pushups")
            #expect(try await env.call(.put, "/v1/workouts/\(workoutID)", as: coach, json: TrainingTestEnvironment.workout(library)).status == .ok)
            #expect(try await env.call(.delete, "/v1/exercises/\(id)", as: coach).status == .noContent)
            #expect(try await env.call(.get, "/v1/exercises/\(id)", as: coach).status == .notFound)
            #expect(try await env.call(.delete, "/v1/exercises/\(id)", as: coach).status == .notFound)
        }
    }
}
