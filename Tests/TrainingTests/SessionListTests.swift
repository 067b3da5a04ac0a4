import Foundation
import Testing
import TestSupport
@testable import Training

/// Today and My Workouts are written by PostgreSQL, one session as `GET /v1/training/sessions/{id}`
/// writes it in the service: both must give the same answer for every kind of set and text.
@Suite struct SessionListTests {
    @Test func aListWritesEachSessionAsItsDetailDoes() async throws {
        try await TrainingTestEnvironment.run { env in
            let coach = try await env.coach()
            let client = try await env.client()
            let entry = try await env.rosterEntry(of: coach)
            try await env.accept(entry, coach: coach, client: client)
            let press = try await env.libraryExercise("Pushups")
            let text = "Keep it \"tight\" / not \\ loose:\nüñï 👩‍🍳 <b>&amp;</b> 8F3E2A10-0000-4000-8000-000000000000?"
            let sets: [[String: Any]] = [
                ["reps": 8, "weight_kg": 60.5, "rpe": 7.5, "rest_s": 90],
                ["duration_s": 45, "weight_kg": 0.1, "rest_s": 0],
                ["distance_m": 400.25, "weight_kg": NSNull()],
                ["reps": 1, "weight_kg": 1_000, "rpe": 10],
                ["reps": 12, "weight_kg": 22.679619],
            ]
            let workout: [String: Any] = [
                "name": "Push \"day\" / ü 👩‍🍳", "notes": text,
                "blocks": [
                    ["exercise_id": press, "notes": text, "superset": "A", "sets": sets],
                    ["exercise_id": press, "sets": [["reps": 5]]],
                ],
            ]
            let created = try await env.call(.post, "/v1/workouts", as: coach, json: workout)
            try #require(created.status == .created, "\(created.text)")
            let days = (0...2).map { TrainingTestEnvironment.day($0) }
            let ids = try await env.assign(try #require(created.json["id"] as? String), to: entry, by: coach, on: days)
            // One logged, one skipped with a reason, one as planned.
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[0])/log", as: client, json: TrainingTestEnvironment.log(sets: 2)).status == .ok)
            #expect(try await env.call(.post, "/v1/training/sessions/\(ids[1])/skip", as: client, json: ["reason": text]).status == .ok)

            // A session kept from before its blocks were kept as the API writes them: written on each read.
            try await env.execute("UPDATE sessions SET blocks_view_kg = NULL, blocks_view_lbs = NULL WHERE id = '\(ids[2])'")
            #expect(try await env.count("SELECT count(*) FROM sessions WHERE blocks_view_kg IS NULL") == 1)

            for unit in ["kg", "lbs"] {
                #expect(try await env.call(.put, "/v1/training/settings", as: client, json: ["time_zone": "UTC", "weight_unit": unit]).status == .ok)
                let list = try await env.call(.get, "/v1/training/sessions?from=\(days[0])&to=\(days[2])", as: client)
                try #require(list.status == .ok, "\(list.text)")
                // Compact, its keys in the API's order.
                #expect(list.text.hasPrefix("{\"from\":\"\(days[0])\",\"items\":[{\"blocks\":[{\"exercise_id\":\"\(press.lowercased())\",\"exercise_name\":"), "\(list.text)")
                #expect(list.text.hasSuffix("],\"time_zone\":\"UTC\",\"to\":\"\(days[2])\",\"weight_unit\":\"\(unit)\"}"), "\(list.text)")
                #expect(list.ids == ids)
                for item in list.items {
                    let id = try #require(item["id"] as? String)
                    var detail = try await env.call(.get, "/v1/training/sessions/\(id)", as: client).json
                    for key in ["comments", "log_notes", "logged_sets"] { #expect(detail.removeValue(forKey: key) != nil) }
                    #expect(NSDictionary(dictionary: item).isEqual(to: detail), "list: \(item)\ndetail: \(detail)")
                }
                let first = try #require(list.items.first)
                #expect(first["name"] as? String == "Push \"day\" / ü 👩‍🍳" && first["notes"] as? String == text && first["status"] as? String == "partial")
                #expect(first[path: "blocks.0.sets.0.weight"] as? Double == (unit == "kg" ? 60.5 : 133.379669))
                #expect(first[path: "blocks.0.sets.2.weight"] is NSNull && first[path: "blocks.1.sets.0.weight_kg"] is NSNull)
                #expect(list.items[1]["skip_reason"] as? String == text && list.items[2]["performed_at"] is NSNull)
            }
            // A time an app sends to the millisecond reads back as sent, in the list and the session.
            for millisecond in stride(from: 7, to: 1000, by: 50) {
                let performed = "\(days[0])T07:30:00.\(String(format: "%03d", millisecond))"
                var body = TrainingTestEnvironment.log(sets: 2)
                body["performed_at"] = performed + "+00:00"
                #expect(try await env.call(.post, "/v1/training/sessions/\(ids[0])/log", as: client, json: body).status == .ok)
                let listed = try await env.call(.get, "/v1/training/today", as: client).items.first?["performed_at"] as? String
                let detail = try await env.call(.get, "/v1/training/sessions/\(ids[0])", as: client).json["performed_at"] as? String
                #expect(listed == performed + "Z" && detail == performed + "Z", "\(String(describing: listed)), \(String(describing: detail))")
            }
            // Today alone, in the caller's zone, and a day without sessions.
            let today = try await env.call(.get, "/v1/training/today", as: client)
            #expect(today.ids == [ids[0]] && today.json["from"] as? String == days[0] && today.json["to"] as? String == days[0])
            let empty = try await env.call(.get, "/v1/training/sessions?from=\(TrainingTestEnvironment.day(10))", as: client)
            #expect(empty.text.contains("\"items\":[],") && empty.items.isEmpty, "\(empty.text)")
            // The week from a day near the last the API writes ends on that day.
            let last = try await env.call(.get, "/v1/training/sessions?from=9999-12-29", as: client)
            #expect(last.status == .ok && last.json["to"] as? String == "9999-12-31", "\(last.text)")
        }
    }
}
