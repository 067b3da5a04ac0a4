import ServiceKit

@main
enum NutritionMain {
    static func main() async {
        await ServiceLauncher.main(NutritionService.definition)
    }
}
