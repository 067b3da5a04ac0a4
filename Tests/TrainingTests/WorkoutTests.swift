import Foundation
import HTTPTypes
import NIOCore
import Testing
import TestSupport

/// A coach's workouts: coaches only, each seen by its author only, checked field by field, changed
/// under `If-Match`.
@Suite struct WorkoutTests {
    @Test func theAuthorWritesReadsReplacesAndDeletes() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let press = try await env.libraryExercise("Barbell Bench Press - Medium Grip")
            let plank = try await env.libraryExercise("Plank")
            let body: [String: Any] = [
                "name": "Upper A", "notes": "Warm up first.",
                "blocks": [
                    ["exercise_id": press, "superset": "A", "notes": "Pause on the chest.", "sets": [["reps": 5, "weight_kg": 82.5, "rpe": 8.5, "rest_s": 180]]],
                    ["exercise_id": plank, "superset": "A", "sets": [["duration_s": 60], ["duration_s": 45, "rest_s": 30]]],
                ],
            ]
            let created = try await env.call(.post, "/v1/workouts", as: coach, json: body)
            #expect(created.status == .created, "\(created.text)")
            let id = try #require(created.json["id"] as? String)
            let etag = try #require(created.headers[.eTag])
            #expect(created.headers[.location] == "/v1/workouts/\(id)")
            #expect(created.json[path: "blocks.0.sets.0.weight_kg"] as? Double == 82.5 && created.json[path: "blocks.0.sets.0.rpe"] as? Double == 8.5)
            #expect(created.json[path: "blocks.1.sets.1.duration_s"] as? Int == 45 && created.json[path: "blocks.1.sets.1.reps"] is NSNull)
            #expect(created.json[path: "blocks.0.superset"] as? String == "A" && created.json[path: "blocks.1.notes"] is NSNull)
            let read = try await env.call(.get, "/v1/workouts/\(id)", as: coach)
            #expect(read.status == .ok && read.headers[.eTag] == etag && read.json["blocks"] as? NSArray == created.json["blocks"] as? NSArray)
            let list = try await env.call(.get, "/v1/workouts", as: coach)
            #expect(list.ids == [id] && list.items.first?["block_count"] as? Int == 2 && list.items.first?["set_count"] as? Int == 3)
            #expect(list.items.first?["exercise_ids"] as? [String] == [press, plank])
            // Replaced under the version it was read at; the old version is then refused.
            var next = body
            next["name"] = "Upper B"
            let replaced = try await env.call(.put, "/v1/workouts/\(id)", as: coach, json: next, headers: [.ifMatch: etag])
            #expect(replaced.status == .ok && replaced.json["name"] as? String == "Upper B")
            let newTag = try #require(replaced.headers[.eTag])
            #expect(newTag != etag)
            let stale = try await env.call(.put, "/v1/workouts/\(id)", as: coach, json: body, headers: [.ifMatch: etag])
            #expect(stale.status == .preconditionFailed && stale.code == "precondition_failed" && stale.headers[.eTag] == newTag)
            #expect(try await env.call(.delete, "/v1/workouts/\(id)", as: coach, headers: [.ifMatch: etag]).status == .preconditionFailed)
            #expect(try await env.call(.get, "/v1/workouts/\(id)", as: coach).json["name"] as? String == "Upper B")
            #expect(try await env.call(.delete, "/v1/workouts/\(id)", as: coach, headers: [.ifMatch: newTag]).status == .noContent)
            #expect(try await env.call(.get, "/v1/workouts/\(id)", as: coach).code == "workout_not_found")
            #expect(try await env.call(.delete, "/v1/workouts/\(id)", as: coach).status == .notFound)
            #expect(try await env.count("SELECT count(*) FROM workout_exercises") == 0)
        }
    }

    @Test func onlyTheAuthorSeesItAndOnlyCoachesReachTheRoutes() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let otherCoach = try await env.coach()
            let client = try await env.client()
            try await env.link(coach: coach, client: client)
            let press = try await env.libraryExercise("Pushups")
            let id = try #require(try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(press)).json["id"] as? String)
            let body = TrainingTestEnvironment.workout(press, name: "Taken over")
            #expect(try await env.call(.get, "/v1/workouts/\(id)", as: otherCoach).code == "workout_not_found")
            #expect(try await env.call(.put, "/v1/workouts/\(id)", as: otherCoach, json: body).code == "workout_not_found")
            #expect(try await env.call(.delete, "/v1/workouts/\(id)", as: otherCoach).code == "workout_not_found")
            #expect(try await env.call(.get, "/v1/workouts", as: otherCoach).items.isEmpty)
            for caller in [client, try await env.user()] {
                for (method, path) in [
                    (HTTPRequest.Method.post, "/v1/workouts"), (.get, "/v1/workouts"), (.get, "/v1/workouts/\(id)"), (.put, "/v1/workouts/\(id)"),
                    (.delete, "/v1/workouts/\(id)"),
                ] {
                    let reply = try await env.call(method, path, as: caller, json: method == .post || method == .put ? body : nil)
                    #expect(reply.status == .forbidden && reply.code == "forbidden", "\(method) \(path)")
                }
            }
            for (method, path) in [(HTTPRequest.Method.post, "/v1/workouts"), (.get, "/v1/workouts"), (.get, "/v1/workouts/\(id)")] {
                #expect(try await env.call(method, path, json: method == .post ? body : nil).status == .unauthorized)
            }
            #expect(try await env.call(.get, "/v1/workouts/\(id)", as: coach).json["name"] as? String == "Push day")
            #expect(try await env.call(.get, "/v1/workouts/nope", as: coach).code == "workout_not_found")
        }
    }

    @Test func validationNamesEachField() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let press = try await env.libraryExercise("Pushups")
            func problems(_ body: Any) async throws -> Set<String> {
                let reply = try await env.call(.post, "/v1/workouts", as: coach, json: body)
                #expect(reply.status == .badRequest, "\(reply.text)")
                return Set(reply.fieldErrors)
            }
            #expect(try await problems(TrainingTestEnvironment.workout(press, blocks: 51)) == ["blocks"])
            #expect(try await problems(TrainingTestEnvironment.workout(press, blocks: 0)) == ["blocks"])
            #expect(try await problems(TrainingTestEnvironment.workout(press, sets: 21)) == ["blocks[0].sets"])
            #expect(try await problems(TrainingTestEnvironment.workout(press, sets: 0)) == ["blocks[0].sets"])
            #expect(try await problems(TrainingTestEnvironment.workout(press, name: " ")) == ["name"])
            func sets(_ sets: [[String: Any]], superset: Any = NSNull()) -> [String: Any] {
                ["name": "W", "blocks": [["exercise_id": press, "superset": superset, "sets": sets] as [String: Any]]]
            }
            #expect(try await problems(sets([["reps": 5, "duration_s": 30]])) == ["blocks[0].sets[0]"])
            #expect(try await problems(sets([["weight_kg": 40]])) == ["blocks[0].sets[0]"])
            #expect(
                try await problems(sets([["reps": 0, "rpe": 11, "weight_kg": -1, "rest_s": 3_601], ["distance_m": 0], ["duration_s": 86_401]]))
                    == [
                        "blocks[0].sets[0].reps", "blocks[0].sets[0].rpe", "blocks[0].sets[0].weight_kg", "blocks[0].sets[0].rest_s",
                        "blocks[0].sets[1].distance_m", "blocks[0].sets[2].duration_s",
                    ])
            #expect(try await problems(sets([["reps": 5]], superset: "")) == ["blocks[0].superset"])
            let fraction = try await env.call(.post, "/v1/workouts", as: coach, json: sets([["reps": 5.5]]))
            #expect(fraction.fieldErrors == ["blocks[0].sets[0].reps"], "\(fraction.text)")
            #expect(try await problems(sets([["reps": "5"]])) == ["blocks[0].sets[0].reps"])
            #expect(try await problems(sets([["reps": 5, "weight_kg": 1e300]])) == ["blocks[0].sets[0].weight_kg"])
            #expect(try await problems(sets([["reps": 5, "repz": 5]])) == ["blocks[0].sets[0].repz"])
            #expect(try await problems(["name": "W", "blocks": [["exercise_id": press, "sets": [["reps": 5]], "note": "x"]]]) == ["blocks[0].note"])
            #expect(try await problems(["name": "W", "blocks": [["exercise_id": "not-a-uuid", "sets": [["reps": 5]]]]]) == ["blocks[0].exercise_id"])
            #expect(try await problems(["name": "W", "blocks": [["sets": [["reps": 5]]]]]) == ["blocks[0].exercise_id"])
            #expect(try await problems(["name": "W", "blocks": "many"]) == ["blocks"])
            // An exercise the coach may not use: unknown, or another coach's own, even one whose
            // exercises the coach sees as that coach's client.
            let other = try await env.coach()
            try await env.link(coach: other, client: coach)
            let theirs = try #require(try await env.call(.post, "/v1/exercises", as: other, json: ["name": "Secret lift"]).json["id"] as? String)
            #expect(try await env.call(.get, "/v1/exercises/\(theirs)", as: coach).status == .ok, "seen as a client")
            var mixed = TrainingTestEnvironment.workout(press, blocks: 3)
            var blocks = mixed["blocks"] as! [[String: Any]]
            blocks[1]["exercise_id"] = theirs
            blocks[2]["exercise_id"] = UUID().uuidString
            mixed["blocks"] = blocks
            #expect(try await problems(mixed) == ["blocks[1].exercise_id", "blocks[2].exercise_id"])
            let json: HTTPFields = [.contentType: "application/json"]
            #expect(try await env.call(.post, "/v1/workouts", as: coach, raw: ByteBuffer(string: "{\"name\": \"W\", \"blocks\": ["), headers: json).code == "malformed_json")
            let huge = ByteBuffer(string: "{\"name\": \"" + String(repeating: "a", count: 3 << 20) + "\"}")
            #expect(try await env.call(.post, "/v1/workouts", as: coach, raw: huge, headers: json).status == .contentTooLarge)
            #expect(try await env.count("SELECT count(*) FROM workouts") == 0)
            // The largest workout allowed is taken whole.
            let largest = try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(press, blocks: 50, sets: 20))
            #expect(largest.status == .created && (largest.json["blocks"] as? [Any])?.count == 50)
        }
    }

    /// Edits racing from the same version: exactly one is taken, the others are told it changed.
    @Test func racingEditsFromOneVersionTakeOne() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let press = try await env.libraryExercise("Pushups")
            let created = try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(press))
            let id = try #require(created.json["id"] as? String)
            let etag = try #require(created.headers[.eTag])
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for index in 0..<6 {
                    let body = TrainingTestEnvironment.workout(press, name: "Edit \(index)")
                    group.addTask { try await env.concurrentCall(.put, "/v1/workouts/\(id)", as: coach, json: body, headers: [("If-Match", etag)]) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .ok }.count == 1 && statuses.filter { $0 == .preconditionFailed }.count == 5, "\(statuses)")
            #expect(try await env.count("SELECT count(*) FROM workouts WHERE version = 2") == 1)
        }
    }

    @Test func pagesListNewestFirst() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let press = try await env.libraryExercise("Pushups")
            var made: [String] = []
            for index in 0..<5 {
                made.append(try #require(try await env.call(.post, "/v1/workouts", as: coach, json: TrainingTestEnvironment.workout(press, name: "W\(index)")).json["id"] as? String))
            }
            let first = try await env.call(.get, "/v1/workouts?limit=3", as: coach)
            let cursor = try #require(first.json["next_cursor"] as? String)
            let second = try await env.call(.get, "/v1/workouts?limit=3&cursor=\(cursor)", as: coach)
            #expect(first.ids + second.ids == made.reversed() && second.json["next_cursor"] is NSNull)
            #expect(try await env.call(.get, "/v1/workouts?cursor=junk", as: coach).code == "invalid_cursor")
            #expect(try await env.call(.get, "/v1/workouts?limit=0", as: coach).fieldErrors == ["limit"])
        }
    }
}
