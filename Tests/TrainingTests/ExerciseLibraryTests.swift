import Foundation
import HTTPTypes
import NIOCore
import Testing
import TestSupport

/// The library as shipped: loaded whole by its migration, searched with typos, run-together words
/// and plurals, filtered, paged, read one by one.
@Suite struct ExerciseLibraryTests {
    @Test func theWholeDataSetIsLoadedWithImagesPointingAtTheDataSet() async throws {
        try await TrainingTestEnvironment.run { env in
            #expect(try await env.count("SELECT count(*) FROM exercises WHERE coach_id IS NULL") == 873)
            let anyone = try await env.user()
            let id = try await env.libraryExercise("Barbell Bench Press - Medium Grip")
            let reply = try await env.call(.get, "/v1/exercises/\(id)", as: anyone)
            #expect(reply.status == .ok && reply.headers[.eTag] != nil)
            #expect(reply.json["source"] as? String == "library" && reply.json["coach_id"] is NSNull)
            #expect(reply.json["level"] as? String == "beginner" && reply.json["equipment"] as? String == "barbell")
            #expect(reply.json["primary_muscles"] as? [String] == ["chest"])
            #expect((reply.json["instructions"] as? [String])?.isEmpty == false)
            let images = reply.json["images"] as? [String] ?? []
            #expect(images.first == "https://raw.githubusercontent.com/yuhonas/free-exercise-db/acd61f751fe15d618862ee3084f27e839222a28f/exercises/Barbell_Bench_Press_-_Medium_Grip/0.jpg")
        }
    }

    @Test func namesMatchWithTyposRunTogetherWordsAndPlurals() async throws {
        try await TrainingTestEnvironment.run { env in
            let anyone = try await env.user()
            func names(_ q: String) async throws -> [String] {
                let reply = try await env.call(.get, "/v1/exercises?q=\(q)&limit=100", as: anyone)
                #expect(reply.status == .ok, "\(q): \(reply.text)")
                return reply.items.compactMap { $0["name"] as? String }
            }
            let bench = try await names("benchpress")
            #expect(bench.contains("Barbell Bench Press - Medium Grip"), "\(bench)")
            #expect(bench.prefix(10).allSatisfy { $0.lowercased().contains("bench press") }, "\(bench.prefix(10))")
            let squats = try await names("squats")
            #expect(squats.contains("Barbell Squat") && squats.count >= 10, "\(squats)")
            #expect(squats.prefix(10).allSatisfy { $0.lowercased().contains("squat") }, "\(squats.prefix(10))")
            let dumbbell = try await names("dumbell")
            #expect(dumbbell.count >= 20 && dumbbell.prefix(20).allSatisfy { $0.lowercased().contains("dumbbell") }, "\(dumbbell.prefix(20))")
            let curls = try await names("bicep%20curls")
            #expect(curls.contains("Dumbbell Bicep Curl"), "\(curls)")
            // A word nothing is called does not return the library.
            #expect(try await names("xylophone").isEmpty)
            // Queries of no word at all, or only stop words, match nothing rather than fail.
            #expect(try await names("%25%25%25").isEmpty)
            #expect(try await names("-").isEmpty)
            _ = try await names("the%20and")
        }
    }

    @Test func filtersByMuscleEquipmentAndLevel() async throws {
        try await TrainingTestEnvironment.run { env in
            let anyone = try await env.user()
            let reply = try await env.call(.get, "/v1/exercises?muscle=chest&equipment=dumbbell&level=beginner&limit=100", as: anyone)
            #expect(reply.status == .ok && !reply.items.isEmpty)
            for item in reply.items {
                let muscles = (item["primary_muscles"] as? [String] ?? []) + (item["secondary_muscles"] as? [String] ?? [])
                #expect(muscles.contains("chest") && item["equipment"] as? String == "dumbbell" && item["level"] as? String == "beginner")
            }
            let expected = try await env.count(
                "SELECT count(*) FROM exercises WHERE 'chest' = ANY (primary_muscles || secondary_muscles) AND equipment = 'dumbbell' AND level = 'beginner'")
            #expect(reply.items.count == expected)
            let spaced = try await env.call(.get, "/v1/exercises?equipment=body%20only&q=pushups", as: anyone)
            #expect(spaced.status == .ok && spaced.items.contains { $0["name"] as? String == "Pushups" }, "\(spaced.text)")
            let bad = try await env.call(.get, "/v1/exercises?muscle=wings&level=godlike&equipment=spoon", as: anyone)
            #expect(bad.status == .badRequest && bad.code == "validation_failed" && Set(bad.fieldErrors) == ["muscle", "level", "equipment"])
        }
    }

    @Test func pagesWalkEveryMatchOnceInOrder() async throws {
        try await TrainingTestEnvironment.run { env in
            let anyone = try await env.user()
            for query in ["", "&q=press"] {
                var seen: [String] = []
                var cursor: String?
                repeat {
                    let reply = try await env.call(.get, "/v1/exercises?limit=100\(query)\(cursor.map { "&cursor=\($0)" } ?? "")", as: anyone)
                    #expect(reply.status == .ok)
                    seen += reply.ids
                    cursor = reply.json["next_cursor"] as? String
                } while cursor != nil && seen.count < 2_000
                #expect(Set(seen).count == seen.count)
                if query.isEmpty {
                    #expect(seen.count == 873)
                } else {
                    let all = try await env.call(.get, "/v1/exercises?limit=100&q=press", as: anyone)
                    #expect(seen.count > 100 || all.json["next_cursor"] is NSNull)
                    #expect(Array(seen.prefix(all.ids.count)) == all.ids)
                }
            }
            let bad = try await env.call(.get, "/v1/exercises?cursor=notacursor", as: anyone)
            #expect(bad.status == .badRequest && bad.code == "invalid_cursor")
            let long = try await env.call(.get, "/v1/exercises?q=\(String(repeating: "a", count: 101))", as: anyone)
            #expect(long.status == .badRequest && long.fieldErrors == ["q"])
        }
    }

    @Test func needsATokenAndAnswers404ForUnknownIDs() async throws {
        try await TrainingTestEnvironment.run { env in
            #expect(try await env.call(.get, "/v1/exercises").status == .unauthorized)
            #expect(try await env.call(.get, "/v1/exercises/\(UUID())").status == .unauthorized)
            let expired = TrainingTestEnvironment.User(id: UUID(), token: try await env.issuer.token(issuedAt: Date().addingTimeInterval(-3_600), expiresIn: 60))
            #expect(try await env.call(.get, "/v1/exercises", as: expired).code == "token_expired")
            let anyone = try await env.user()
            #expect(try await env.call(.get, "/v1/exercises/\(UUID())", as: anyone).code == "exercise_not_found")
            #expect(try await env.call(.get, "/v1/exercises/not-a-uuid", as: anyone).code == "exercise_not_found")
        }
    }
}
