import Foundation
import Models
@testable import Nutrition
import Testing
import TestSupport

/// Answers byte for byte: unset fields written as `null`, keys sorted, whatever writes them.
@Suite struct NutritionResponseBytesTests {
    @Test func aPageOfMealsAndTheWeightsAreWrittenWithTheirNulls() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            _ = try await env.setProfile(user)
            #expect(try await env.call(.get, "/v1/meals", as: user).text == #"{"items":[],"next_cursor":null}"#)
            let logged = try await env.call(.post, "/v1/metrics/weight", as: user, json: ["value": 80.5, "unit": "kg"])
            let date = try #require(logged.json["date"] as? String)
            let weights = try await env.call(.get, "/v1/metrics/weight?days=30", as: user)
            #expect(weights.text == #"{"days":[{"date":"\#(date)","notes":null,"value":80.5}],"moving_average_7d":80.5,"slope_per_week":null,"unit":"kg"}"#)
        }
    }
}
