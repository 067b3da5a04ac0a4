import ServiceKit

@main
enum TrainingMain {
    static func main() async {
        await ServiceLauncher.main(TrainingService.definition)
    }
}
