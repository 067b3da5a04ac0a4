import FoodBackendAPI
import FoodBackendClient
import Foundation

/// A meal is posted, edited, eaten and seen in the trend; shared and unshared; metrics logged and removed.
func aMealIsPostedEatenAndSeenInTrends() async throws {
    let user = try await signUp("meals")
    let app = user.app
    _ = try await app.send {
        try await $0.putV1NutritionProfile(
            body: .json(.init(dailyCalorieGoal: 1800, dayStartsAt: 0, diet: .keto, timeZone: "Europe/Paris", weightUnit: .kg))
        ).ok.body.json
    }
    let diet = try await app.send { try await $0.getV1NutritionProfile().ok.body.json }
    try expect(diet.diet == .keto, "the diet profile: \(diet)")
    let input = Components.Schemas.MealInput(
        eatenAt: Date().addingTimeInterval(-1200), items: [.init(calories: 180, carbsG: 1, fatG: 12, grams: 120, name: "Eggs", proteinG: 15)],
        name: "Journey omelette")
    let posted = try await app.send { try await $0.postV1Meals(body: .json(input)) }
    let meal = try posted.created.body.json
    let etag = try posted.created.headers.eTag
    try expect(etag != nil, "the meal's ETag")
    let got = try await app.send { try await $0.getV1MealsId(path: .init(id: meal.id)).ok }
    let read = try got.body.json
    try expect(read.name == "Journey omelette" && !read.consumed, "the meal read back: \(read)")
    if got.headers.eTag != etag { print("note: the meal's ETag at creation \(etag ?? "-") differs from its read's \(got.headers.eTag ?? "-")") }
    var edited = input
    edited.name = "Journey omelette with herbs"
    let put = try await app.send { try await $0.putV1MealsId(path: .init(id: meal.id), headers: .init(ifMatch: got.headers.eTag), body: .json(edited)).ok.body.json }
    try expect(put.name == "Journey omelette with herbs" && put.edited == true, "edited: \(put)")

    _ = try await app.send { try await $0.postV1MealsIdConsume(path: .init(id: meal.id)).ok.body.json }
    _ = try await app.send { try await $0.deleteV1MealsIdConsume(path: .init(id: meal.id)).ok.body.json }
    _ = try await app.send { try await $0.postV1MealsIdConsume(path: .init(id: meal.id)).ok.body.json }
    let trend = try await app.send { try await $0.getV1Trends(query: .init(period: ._7d)).ok.body.json }
    try expect(trend.days.compactMap(\.calories).reduce(0, +) == 180, "the week's trend counts the meal: \(trend.days)")

    // The food table: the edit screen's search, misspelt, then one food by its number.
    let foods = try await app.send { try await $0.getV1Foods(query: .init(q: "brwn rice, cooked", limit: 5)).ok.body.json }
    try expect(foods.items.first?.description.hasPrefix("Rice, brown") == true, "the food search: \(foods.items.map(\.description))")
    let food = try await app.send { try await $0.getV1FoodsNdbNumber(path: .init(ndbNumber: foods.items[0].ndbNumber)).ok.body.json }
    try expect(food.description == foods.items[0].description && food.source == "USDA SR24", "one food: \(food)")

    var eaten: [Components.Schemas.Meal] = []
    for try await item in app.pages({ api, cursor in
        let page = try await api.getV1Meals(query: .init(consumed: ._true, limit: 10, cursor: cursor)).ok.body.json
        return (page.items, page.nextCursor)
    }) {
        eaten.append(item)
    }
    try expect(eaten.map(\.id) == [meal.id], "the eaten meals: \(eaten.map(\.name))")

    // A photo of the meal from the picker's bytes: kept cleaned, read back as a JPEG.
    let withPhoto = try await step("the meal's photo upload") { try await app.uploadMealPhoto(onePixelPNG, mealID: meal.id) }
    try expect(withPhoto.photoUrl != nil, "the meal's photo URL: \(withPhoto)")
    let photo = try await app.send { try await $0.getV1MealsIdPhoto(path: .init(id: meal.id)).ok.body.jpeg }
    try expect(try await Data(collecting: photo, upTo: 4 << 20).starts(with: [0xFF, 0xD8]), "the photo is kept as a JPEG")

    // Shared: a public page, its card and its photo for anyone with the link, gone once unshared.
    let link = try await app.send { try await $0.postV1MealsIdShare(path: .init(id: meal.id)).created.body.json }
    let anyone = newApp()
    let shared = try await anyone.send { try await $0.getV1SharedToken(path: .init(token: link.token)).ok.body.json }
    try expect(shared.name == "Journey omelette with herbs", "the shared meal: \(shared)")
    let card = try await anyone.send { try await $0.getV1SharedTokenCard_png(path: .init(token: link.token)).ok.body.png }
    try expect(try await Data(collecting: card, upTo: 4 << 20).starts(with: [0x89, 0x50, 0x4E, 0x47]), "the card is a PNG")
    let page = try await text(try await anyone.send { try await $0.getSharedToken(path: .init(token: link.token)).ok.body.html })
    try expect(page.contains("Journey omelette"), "the shared page names the meal")
    let sharedPhoto = try await anyone.send { try await $0.getV1SharedTokenPhoto(path: .init(token: link.token)).ok.body.jpeg }
    try expect(try await Data(collecting: sharedPhoto, upTo: 4 << 20).starts(with: [0xFF, 0xD8]), "the shared photo")
    _ = try await app.send { try await $0.deleteV1MealsIdShare(path: .init(id: meal.id)).noContent }
    _ = try await app.send { try await $0.deleteV1MealsIdPhoto(path: .init(id: meal.id)).noContent }

    // A photo analysed by the vision model and logged, not yet eaten, with the photo kept.
    let analysed = try await step("the photo's analysis") {
        try await app.analyzeMeal(photo: onePixelPNG, hint: "no sauce", eatenAt: Date().addingTimeInterval(-300))
    }
    try expect(!analysed.consumed && analysed.photoUrl != nil && !analysed.items.isEmpty, "the analysed meal: \(analysed)")

    // Metrics: a weight and a ketone reading today, read back, then the day's metrics removed.
    let weight = try await app.send { try await $0.postV1MetricsWeight(body: .json(.init(unit: .kg, value: 70.5))).created.body.json }
    _ = try await app.send { try await $0.postV1MetricsKetones(body: .json(.init(mmolPerL: 0.8))).created.body.json }
    let weights = try await app.send { try await $0.getV1MetricsWeight().ok.body.json }
    try expect(!weights.days.isEmpty, "a weight: \(weights)")
    _ = try await app.send { try await $0.getV1MetricsKetones().ok.body.json }
    _ = try await app.send { try await $0.deleteV1MetricsDate(path: .init(date: weight.date)).noContent }
    _ = try await app.send { try await $0.deleteV1MealsId(path: .init(id: meal.id)).noContent }
    try await expectProblem("meal_not_found", "the deleted meal") { try await app.send { try await $0.getV1MealsId(path: .init(id: meal.id)).ok } }
}
